// Service accounts: identities an admin issues keys to, for programs that have no user on a cluster host
// (CI runners, notebooks, schedulers). A key is shown once, when issued; the allocator keeps only its
// SHA-256. A request proves it is the account with `Authorization: Bearer <key>`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "identity.h"

namespace gpool::allocator {

struct ServiceAccount {
  std::string name;
  std::vector<std::string> groups;  // the first is the one its leases are charged to
  std::string key_hash;             // hex SHA-256 of the key
  int64_t created_unix_s = 0;
};

class ServiceAccounts {
 public:
  void restore(std::vector<ServiceAccount> accounts);
  // A new account with a new key, or (`rotate`) a new key for an existing one (the old key stops working).
  // Returns the key; throws std::invalid_argument for a bad name or group, a name taken or unknown.
  std::string issue(const std::string& name, const std::vector<std::string>& groups, bool rotate, int64_t now_unix_s);
  bool remove(const std::string& name);
  const ServiceAccount* find(const std::string& name) const;
  const std::map<std::string, ServiceAccount>& all() const { return by_name_; }
  // The account a key belongs to.
  std::optional<Identity> identify(const std::string& key) const;

  static constexpr const char* kKeyPrefix = "gpsa1.";

 private:
  std::map<std::string, ServiceAccount> by_name_;
  std::map<std::string, std::string> name_by_hash_;
};

}  // namespace gpool::allocator
