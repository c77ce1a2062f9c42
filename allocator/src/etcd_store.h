// The allocator's state in etcd (issue 16; gpool-allocator --store etcd://HOST:PORT,HOST:PORT,...),
// through etcd's v3 JSON gateway over HTTP: one key per record under /gpool/, each holding the same JSON
// document the SQLite store keeps. save() writes in one etcd transaction (all or nothing). The endpoints
// are tried in turn: any member of the cluster answers.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "store.h"

namespace httplib {
class Client;
}

namespace gpool::allocator {

class EtcdStore : public Store {
 public:
  // `url`: etcd://HOST:PORT[,HOST:PORT...]. Throws StoreError for a malformed URL, or when no member answers.
  explicit EtcdStore(const std::string& url);
  ~EtcdStore() override;

  std::optional<std::string> policyText() override;
  std::map<std::string, Server> servers() override;
  std::map<std::string, Lease> leases(bool include_ended) override;
  std::vector<ServiceAccount> serviceAccounts() override;
  void saveServiceAccount(const std::string& name, const ServiceAccount* account) override;
  std::map<std::string, std::string> serverKeys() override;
  void saveServerKey(const std::string& name, const std::string* public_pem) override;
  void checkpoint() override {}  // etcd compacts its own history (its --auto-compaction-* flags)
  void save(const Scheduler& s, const std::vector<std::string>& servers, const std::vector<std::string>& leases,
            const std::string* policy_text = nullptr) override;
  int forgetEndedBefore(int64_t cutoff_unix_s) override;

 private:
  using Op = nlohmann::json;  // one request of a transaction
  static Op put(const std::string& key, const std::string& value);
  static Op erase(const std::string& key);
  nlohmann::json call(const std::string& path, const nlohmann::json& body);  // POST to a member that answers
  std::vector<std::pair<std::string, std::string>> range(const std::string& prefix);  // (key, value) under prefix
  void commit(const std::vector<Op>& ops);  // one transaction
  std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<httplib::Client>> clients_;
  size_t current_ = 0;  // the member that answered last
};

}  // namespace gpool::allocator
