// The allocator's state in etcd (etcd_store.h).
#include "etcd_store.h"

#include "model_json.h"

namespace gpool::allocator {

namespace {

using nlohmann::json;

const std::string kPrefix = "/gpool/";

std::string base64(const std::string& in) { return etcdBase64(in); }
std::string unbase64(const std::string& in) { return etcdUnbase64(in); }

// The key just past every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefixEnd(std::string prefix) {
  prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

}  // namespace

EtcdStore::EtcdStore(const std::string& url, const EtcdAccess& access) : etcd_(url, 5, access), leader_(url, access) {
  etcd_.call("/v3/maintenance/status", json::object());  // a member answers, or the allocator does not start
}

EtcdStore::~EtcdStore() = default;

bool EtcdStore::lead(Campaign c) { return leading_ = leader_.campaign(std::move(c)); }

void EtcdStore::agreeOn(const std::string& secret, const std::string& fingerprint, const std::string& fix) {
  json txn = etcd_.putIfAbsent(kPrefix + "fingerprints/" + secret, fingerprint);
  if (txn.value("succeeded", false)) return;
  std::string recorded = unbase64(txn.at("responses").at(0).at("response_range").at("kvs").at(0).value("value", ""));
  if (recorded != fingerprint)
    throw StoreError("this allocator's " + secret + " (fingerprint " + fingerprint + ") is not the one the replicas sharing " + etcd_.url() +
                     " use (fingerprint " + recorded + "): " + fix);
}

EtcdStore::Op EtcdStore::put(const std::string& key, const std::string& value) {
  return {{"request_put", {{"key", base64(kPrefix + key)}, {"value", base64(value)}}}};
}

EtcdStore::Op EtcdStore::erase(const std::string& key) { return {{"request_delete_range", {{"key", base64(kPrefix + key)}}}}; }

std::vector<std::pair<std::string, std::string>> EtcdStore::range(const std::string& prefix) {
  const std::string from = kPrefix + prefix;
  json j = etcd_.call("/v3/kv/range", {{"key", base64(from)}, {"range_end", base64(prefixEnd(from))}});
  std::vector<std::pair<std::string, std::string>> out;
  if (j.contains("kvs") && j["kvs"].is_array())
    for (const auto& kv : j["kvs"])
      out.emplace_back(unbase64(kv.value("key", "")).substr(from.size()), unbase64(kv.value("value", "")));
  return out;
}

void EtcdStore::commit(const std::vector<Op>& ops) {
  if (ops.empty()) return;
  json txn = {{"success", ops}};
  if (leading_)  // the key this allocator created, still there: nobody took over
    txn["compare"] = json::array({EtcdClient::createdAt(EtcdLeader::kKey, leader_.revision())});
  if (!etcd_.call("/v3/kv/txn", txn).value("succeeded", false))
    throw StoreDeposed("this allocator no longer leads the replicas sharing " + etcd_.url() + " (its etcd lease lapsed): it wrote nothing");
}

std::optional<std::string> EtcdStore::policyText() {
  for (auto& [key, value] : range("policy"))
    if (key.empty()) return value;
  return std::nullopt;
}

std::map<std::string, Server> EtcdStore::servers() {
  std::map<std::string, Server> out;
  for (const auto& [key, doc] : range("servers/")) {
    Server s = serverFromJson(json::parse(doc));
    out[s.name] = std::move(s);
  }
  return out;
}

// Live leases are under leases/, ended ones under ended/: a new leader reads only the live ones, however
// many ended leases the retention period keeps.
std::map<std::string, Lease> EtcdStore::leases(bool include_ended) {
  std::map<std::string, Lease> out;
  for (const char* prefix : {"leases/", "ended/"}) {
    if (!include_ended && prefix == std::string("ended/")) break;
    for (const auto& [key, doc] : range(prefix)) {
      Lease l = leaseFromJson(json::parse(doc));
      if (include_ended || l.state != LeaseState::kEnded) out[l.id] = std::move(l);
    }
  }
  return out;
}

std::vector<ServiceAccount> EtcdStore::serviceAccounts() {
  std::vector<ServiceAccount> out;
  for (const auto& [key, doc] : range("service-accounts/")) out.push_back(serviceAccountFromJson(json::parse(doc)));
  return out;
}

void EtcdStore::saveServiceAccount(const std::string& name, const ServiceAccount* account) {
  commit({account ? put("service-accounts/" + name, toJson(*account).dump()) : erase("service-accounts/" + name)});
}

std::map<std::string, std::string> EtcdStore::serverKeys() {
  std::map<std::string, std::string> out;
  for (auto& [name, pem] : range("server-keys/")) out[name] = std::move(pem);
  return out;
}

void EtcdStore::saveServerKey(const std::string& name, const std::string* public_pem) {
  commit({public_pem ? put("server-keys/" + name, *public_pem) : erase("server-keys/" + name)});
}

void EtcdStore::write(const Changes& c) {
  std::vector<Op> ops;
  if (c.policy) ops.push_back(put("policy", *c.policy));
  for (const auto& [name, doc] : c.servers) ops.push_back(put("servers/" + name, doc));
  for (const auto& [id, record] : c.leases) {
    bool ended = record.state == LeaseState::kEnded;
    ops.push_back(put((ended ? "ended/" : "leases/") + id, record.doc));
    if (ended) ops.push_back(erase("leases/" + id));
  }
  commit(ops);
}

int EtcdStore::forgetEndedBefore(int64_t cutoff_unix_s) {
  std::vector<Op> ops;
  for (const auto& [id, doc] : range("ended/")) {
    json j = json::parse(doc, nullptr, false);
    if (j.is_object() && j.value("ended_unix_s", int64_t{0}) < cutoff_unix_s) ops.push_back(erase("ended/" + id));
  }
  constexpr size_t kPerTxn = 100;  // under etcd's default --max-txn-ops (128)
  for (size_t i = 0; i < ops.size(); i += kPerTxn)
    commit({ops.begin() + static_cast<std::ptrdiff_t>(i), ops.begin() + static_cast<std::ptrdiff_t>(std::min(ops.size(), i + kPerTxn))});
  return static_cast<int>(ops.size());
}

}  // namespace gpool::allocator
