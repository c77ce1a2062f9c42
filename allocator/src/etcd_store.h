// The allocator's state in etcd (issue 16; gpool-allocator --store etcd://HOST:PORT,HOST:PORT,...),
// through etcd's v3 JSON gateway over HTTP (etcd_client.h): one key per record under /gpool/, each holding
// the same JSON document the SQLite store keeps. write() is one etcd transaction (all or nothing).
// Several allocators may share it: one leads (etcd_leader.h), and each of its transactions holds only
// while it still leads.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "etcd_client.h"
#include "etcd_leader.h"
#include "store.h"

namespace gpool::allocator {

class EtcdStore : public Store {
 public:
  // `url`: etcd://HOST:PORT[,HOST:PORT...]. Throws StoreError for a malformed URL, or when no member answers.
  explicit EtcdStore(const std::string& url, const EtcdAccess& access = {});
  ~EtcdStore() override;  // resigns the lead, if it held it

  bool replicated() const override { return true; }
  bool lead(Campaign c) override;
  std::string leaderSeen() override { return leader_.leaderSeen(); }
  void agreeOn(const std::string& secret, const std::string& fingerprint, const std::string& fix) override;

  std::optional<std::string> policyText() override;
  std::map<std::string, Server> servers() override;
  std::map<std::string, Lease> leases(bool include_ended) override;
  std::vector<ServiceAccount> serviceAccounts() override;
  void saveServiceAccount(const std::string& name, const ServiceAccount* account) override;
  std::map<std::string, std::string> serverKeys() override;
  void saveServerKey(const std::string& name, const std::string* public_pem) override;
  void checkpoint() override {}  // etcd compacts its own history (its --auto-compaction-* flags)
  void write(const Changes& changes) override;
  int forgetEndedBefore(int64_t cutoff_unix_s) override;

 private:
  using Op = nlohmann::json;  // one request of a transaction
  static Op put(const std::string& key, const std::string& value);
  static Op erase(const std::string& key);
  std::vector<std::pair<std::string, std::string>> range(const std::string& prefix);  // (key, value) under prefix
  void commit(const std::vector<Op>& ops);  // one transaction, guarded by the lead once it is held
  EtcdClient etcd_;
  EtcdLeader leader_;
  bool leading_ = false;
};

}  // namespace gpool::allocator
