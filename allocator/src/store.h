// The allocator's store: where the scheduler's state (servers, leases, the policy) and the identities it
// knows (service accounts, servers' keys) are kept, so that a restart loses nothing. Every change is
// written before the API answers. One implementation per kind of store: SQLite, embedded, is the
// default (sqlite_store.h); etcd keeps it in a cluster (etcd_store.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "scheduler.h"
#include "service_accounts.h"

namespace gpool::allocator {

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Store {
 public:
  virtual ~Store() = default;
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  virtual std::optional<std::string> policyText() = 0;
  virtual std::map<std::string, Server> servers() = 0;
  virtual std::map<std::string, Lease> leases(bool include_ended) = 0;
  virtual std::vector<ServiceAccount> serviceAccounts() = 0;
  // Writes one service account (nullptr: deletes it).
  virtual void saveServiceAccount(const std::string& name, const ServiceAccount* account) = 0;
  virtual std::map<std::string, std::string> serverKeys() = 0;  // enrolled servers' public keys (PEM), by name
  virtual void saveServerKey(const std::string& name, const std::string* public_pem) = 0;  // nullptr: deletes it
  // Housekeeping off the request path, about once a second (without the scheduler's lock).
  virtual void checkpoint() = 0;
  // Writes the named records' current state (and the policy text when given), all or nothing.
  virtual void save(const Scheduler& s, const std::vector<std::string>& servers, const std::vector<std::string>& leases,
                    const std::string* policy_text = nullptr) = 0;
  // Deletes the leases that ended before `cutoff_unix_s` by the wall clock (the policy's retention
  // period; ones recorded before their end time was kept count as ended long ago); returns how many.
  virtual int forgetEndedBefore(int64_t cutoff_unix_s) = 0;
};

// The store `where` names: etcd://HOST:PORT,... (etcd_store.h), else a file path (SQLite, made when
// missing). Throws StoreError.
std::unique_ptr<Store> openStore(const std::string& where);

}  // namespace gpool::allocator
