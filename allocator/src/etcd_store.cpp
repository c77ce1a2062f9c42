// The allocator's state in etcd (etcd_store.h).
#include "etcd_store.h"

#include <httplib.h>
#include <openssl/evp.h>

#include "model_json.h"

namespace gpool::allocator {

namespace {

using nlohmann::json;

const std::string kPrefix = "/gpool/";

std::string base64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string unbase64(const std::string& in) {
  if (in.empty()) return "";
  std::string out(3 * in.size() / 4 + 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  if (n < 0) throw StoreError("etcd answered a value that is not base64");
  size_t pad = in.size() >= 2 && in[in.size() - 1] == '=' ? (in[in.size() - 2] == '=' ? 2 : 1) : 0;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

// The key just past every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefixEnd(std::string prefix) {
  prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

}  // namespace

EtcdStore::EtcdStore(const std::string& url) {
  const std::string scheme = "etcd://";
  if (url.rfind(scheme, 0) != 0) throw StoreError("an etcd store is named etcd://HOST:PORT[,HOST:PORT...], not " + url);
  std::string rest = url.substr(scheme.size());
  for (size_t start = 0; start <= rest.size();) {
    size_t comma = rest.find(',', start);
    std::string ep = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (ep.empty() || ep.find(':') == std::string::npos || ep.find('/') != std::string::npos)
      throw StoreError("etcd endpoint '" + ep + "' in " + url + " is not HOST:PORT");
    endpoints_.push_back(ep);
    auto c = std::make_unique<httplib::Client>("http://" + ep);
    c->set_connection_timeout(2, 0);
    c->set_read_timeout(5, 0);
    c->set_write_timeout(5, 0);
    clients_.push_back(std::move(c));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  call("/v3/maintenance/status", json::object());  // a member answers, or the allocator does not start
}

EtcdStore::~EtcdStore() = default;

json EtcdStore::call(const std::string& path, const json& body) {
  std::string why;
  for (size_t tried = 0; tried < clients_.size(); ++tried) {
    size_t i = (current_ + tried) % clients_.size();
    auto r = clients_[i]->Post(path.c_str(), body.dump(), "application/json");
    if (!r) {
      why += endpoints_[i] + ": " + httplib::to_string(r.error()) + "; ";
      continue;
    }
    json j = json::parse(r->body, nullptr, false);
    if (r->status != 200 || !j.is_object()) {
      std::string error = j.is_object() && j.contains("error") ? j["error"].dump() : r->body;
      if (r->status >= 500 || r->status == 0) {  // this member cannot serve now (no leader, stopping): the next
        why += endpoints_[i] + ": " + std::to_string(r->status) + " " + error + "; ";
        continue;
      }
      throw StoreError("etcd " + endpoints_[i] + " refused " + path + ": " + std::to_string(r->status) + " " + error +
                       (error.find("too many operations") != std::string::npos
                            ? " (start etcd with a larger --max-txn-ops: one allocator change writes every record it touched)"
                            : ""));
    }
    current_ = i;
    return j;
  }
  throw StoreError("no etcd member answered " + path + ": " + why);
}

EtcdStore::Op EtcdStore::put(const std::string& key, const std::string& value) {
  return {{"request_put", {{"key", base64(kPrefix + key)}, {"value", base64(value)}}}};
}

EtcdStore::Op EtcdStore::erase(const std::string& key) { return {{"request_delete_range", {{"key", base64(kPrefix + key)}}}}; }

std::vector<std::pair<std::string, std::string>> EtcdStore::range(const std::string& prefix) {
  const std::string from = kPrefix + prefix;
  json j = call("/v3/kv/range", {{"key", base64(from)}, {"range_end", base64(prefixEnd(from))}});
  std::vector<std::pair<std::string, std::string>> out;
  if (j.contains("kvs") && j["kvs"].is_array())
    for (const auto& kv : j["kvs"])
      out.emplace_back(unbase64(kv.value("key", "")).substr(from.size()), unbase64(kv.value("value", "")));
  return out;
}

void EtcdStore::commit(const std::vector<Op>& ops) {
  if (!ops.empty()) call("/v3/kv/txn", {{"success", ops}});
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

std::map<std::string, Lease> EtcdStore::leases(bool include_ended) {
  std::map<std::string, Lease> out;
  for (const auto& [key, doc] : range("leases/")) {
    Lease l = leaseFromJson(json::parse(doc));
    if (include_ended || l.state != LeaseState::kEnded) out[l.id] = std::move(l);
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

void EtcdStore::save(const Scheduler& s, const std::vector<std::string>& servers, const std::vector<std::string>& leases,
                     const std::string* policy_text) {
  std::vector<Op> ops;
  if (policy_text) ops.push_back(put("policy", *policy_text));
  for (const auto& name : servers)
    if (auto it = s.servers().find(name); it != s.servers().end()) ops.push_back(put("servers/" + name, toJson(it->second).dump()));
  for (const auto& id : leases)
    if (const Lease* l = s.lease(id)) ops.push_back(put("leases/" + id, toJson(*l, LeaseView::kRecord).dump()));
  commit(ops);
}

int EtcdStore::forgetEndedBefore(int64_t cutoff_unix_s) {
  std::vector<Op> ops;
  for (const auto& [id, doc] : range("leases/")) {
    json j = json::parse(doc, nullptr, false);
    if (j.is_object() && j.value("state", "") == "ended" && j.value("ended_unix_s", int64_t{0}) < cutoff_unix_s) ops.push_back(erase("leases/" + id));
  }
  constexpr size_t kPerTxn = 100;  // under etcd's default --max-txn-ops (128)
  for (size_t i = 0; i < ops.size(); i += kPerTxn)
    commit({ops.begin() + static_cast<std::ptrdiff_t>(i), ops.begin() + static_cast<std::ptrdiff_t>(std::min(ops.size(), i + kPerTxn))});
  return static_cast<int>(ops.size());
}

}  // namespace gpool::allocator
