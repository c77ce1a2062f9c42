// A client of etcd's v3 JSON gateway (etcd_client.h).
#include "etcd_client.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <unistd.h>

#include <chrono>

#include "store.h"

namespace gpool::allocator {

using nlohmann::json;

std::string etcdBase64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string etcdUnbase64(const std::string& in) {
  if (in.empty()) return "";
  std::string out(3 * in.size() / 4 + 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  if (n < 0) throw StoreError("etcd answered a value that is not base64");
  size_t pad = in.size() >= 2 && in[in.size() - 1] == '=' ? (in[in.size() - 2] == '=' ? 2 : 1) : 0;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

std::unique_ptr<httplib::Client> EtcdClient::member(const std::string& endpoint, int read_timeout_ms) const {
  std::unique_ptr<httplib::Client> c;
  if (access_.ca.empty()) {
    c = std::make_unique<httplib::Client>("http://" + endpoint);
  } else {
    c = std::make_unique<httplib::Client>("https://" + endpoint, access_.cert, access_.key);
    c->enable_server_certificate_verification(true);
    c->set_ca_cert_path(access_.ca.c_str());
  }
  c->set_connection_timeout(1, 0);
  c->set_read_timeout(read_timeout_ms / 1000, (read_timeout_ms % 1000) * 1000);
  c->set_write_timeout(read_timeout_ms / 1000, (read_timeout_ms % 1000) * 1000);
  return c;
}

EtcdClient::EtcdClient(const std::string& url, int read_timeout_s, EtcdAccess access) : url_(url), access_(std::move(access)) {
  for (const std::string* f : {&access_.ca, &access_.cert, &access_.key})
    if (!f->empty() && ::access(f->c_str(), R_OK) != 0) throw StoreError("cannot read " + *f + " (an etcd TLS file)");
  if (access_.cert.empty() != access_.key.empty()) throw StoreError("an etcd client certificate needs its key, and a key its certificate");
  if (!access_.user.empty() && access_.password.empty()) throw StoreError("etcd user " + access_.user + " needs a password");
  const std::string scheme = "etcd://";
  if (url.rfind(scheme, 0) != 0) throw StoreError("an etcd store is named etcd://HOST:PORT[,HOST:PORT...], not " + url);
  std::string rest = url.substr(scheme.size());
  for (size_t start = 0; start <= rest.size();) {
    size_t comma = rest.find(',', start);
    std::string ep = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (ep.empty() || ep.find(':') == std::string::npos || ep.find('/') != std::string::npos)
      throw StoreError("etcd endpoint '" + ep + "' in " + url + " is not HOST:PORT");
    endpoints_.push_back(ep);
    clients_.push_back(member(ep, read_timeout_s * 1000));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}

EtcdClient::~EtcdClient() = default;

namespace {

// What an admin does about etcd's refusal `error`, where gpool can tell.
std::string remedy(const std::string& error) {
  if (error.find("too many operations") != std::string::npos)
    return " (start etcd with a larger --max-txn-ops: one allocator change writes every record it touched)";
  if (error.find("user name is empty") != std::string::npos)
    return " (etcd's authentication is on: give the allocator --etcd-user and --etcd-password-file; docs/admin.md)";
  if (error.find("permission denied") != std::string::npos)
    return " (grant the etcd user a role that may read and write the /gpool/ prefix; docs/admin.md)";
  return "";
}

// Whether a member refused a request for want of a (valid) token: it never had one, or etcd forgot it
// (a token lapses after etcd's --auth-token-ttl unused, and when authentication is turned off and on).
bool wantsToken(const EtcdClient::Answer& a) {
  return a.status == 401 || (a.status == 400 && a.body.find("user name is empty") != std::string::npos);
}

}  // namespace

EtcdClient::Answer EtcdClient::post(size_t i, const std::string& path, const std::string& body, bool with_token) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  if (with_token && !token_.empty()) req.set_header("Authorization", token_);
  Answer a;
  req.response_handler = [&](const httplib::Response& r) {
    a.status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    a.body.append(data, n);
    return a.body.size() <= kMaxAnswer;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  // etcd's gateway ends each error answer with an HTTP trailer (Grpc-Trailer-Content-Type), which this
  // httplib reports as a failed read after the whole body: an answer whose body is whole JSON stands.
  if (!clients_[i]->send(req, res, error) && !(a.status != 0 && json::accept(a.body))) {
    a.status = 0;
    a.failure = httplib::to_string(error == httplib::Error::Success ? httplib::Error::Unknown : error);
  }
  return a;
}

bool EtcdClient::authenticate(size_t i) {
  Answer r = post(i, "/v3/auth/authenticate", json{{"name", access_.user}, {"password", access_.password}}.dump(), false);
  if (r.status == 0 || r.status >= 500) return false;
  json j = json::parse(r.body, nullptr, false);
  std::string error = j.is_object() ? j.value("error", "") : r.body;
  if (error.find("authentication is not enabled") != std::string::npos) {
    token_.clear();  // nothing to prove (yet): requests go without a token
    return true;
  }
  if (r.status != 200 || !j.is_object() || !j.contains("token") || !j["token"].is_string())
    throw StoreError("etcd " + endpoints_[i] + " refused user " + access_.user + ": " + std::to_string(r.status) + " " + error);
  token_ = j["token"].get<std::string>();
  return true;
}

json EtcdClient::call(const std::string& path, const json& body) {
  std::string why;
  const std::string text = body.dump();
  for (size_t tried = 0; tried < clients_.size(); ++tried) {
    size_t i = (current_ + tried) % clients_.size();
    Answer r = post(i, path, text);
    if (r.status != 0 && !access_.user.empty() && wantsToken(r)) r = authenticate(i) ? post(i, path, text) : Answer{0, "", "Connection"};
    if (r.status == 0) {
      why += (why.empty() ? "" : "; ") + endpoints_[i] + ": " + r.failure;
      continue;
    }
    json j = json::parse(r.body, nullptr, false);
    if (r.status != 200 || !j.is_object()) {
      std::string error = j.is_object() && j.contains("error") ? j["error"].dump() : r.body;
      if (r.status >= 500) {  // this member cannot serve now (no leader, stopping): the next
        why += (why.empty() ? "" : "; ") + endpoints_[i] + ": " + std::to_string(r.status) + " " + error;
        continue;
      }
      throw StoreError("etcd " + endpoints_[i] + " refused " + path + ": " + std::to_string(r.status) + " " + error + remedy(error));
    }
    current_ = i;
    return j;
  }
  throw StoreError("no etcd member answered " + path + ": " + why);
}

json EtcdClient::createdAt(const std::string& key, int64_t revision) {
  return {{"key", etcdBase64(key)}, {"target", "CREATE"}, {"create_revision", std::to_string(revision)}};
}

json EtcdClient::putIfAbsent(const std::string& key, const std::string& value, int64_t lease) {
  json put = {{"key", etcdBase64(key)}, {"value", etcdBase64(value)}};
  if (lease) put["lease"] = std::to_string(lease);
  return call("/v3/kv/txn", {{"compare", json::array({createdAt(key, 0)})},
                             {"success", json::array({{{"request_put", put}}})},
                             {"failure", json::array({{{"request_range", {{"key", etcdBase64(key)}}}}})}});
}

bool EtcdClient::watch(const std::string& key, int64_t start_revision, int for_ms, const std::function<bool(const json&)>& events) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(for_ms);
  json create = {{"create_request", {{"key", etcdBase64(key)}, {"start_revision", start_revision}}}};
  for (size_t tried = 0; tried < endpoints_.size(); ++tried) {
    size_t i = (current_ + tried) % endpoints_.size();
    auto member_client = member(endpoints_[i], for_ms);
    httplib::Client& c = *member_client;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v3/watch";
    req.body = create.dump();
    req.set_header("Content-Type", "application/json");
    if (!token_.empty()) req.set_header("Authorization", token_);
    std::string pending;  // the gateway writes one JSON answer per line
    bool more = true, answered = false;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      answered = true;
      pending.append(data, n);
      for (size_t nl; more && (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
        json j = json::parse(pending.substr(0, nl), nullptr, false);
        if (!j.is_object() || !j.contains("result") || !j["result"].is_object()) continue;
        const json& result = j["result"];
        if (result.value("canceled", false)) {  // e.g. a token etcd forgot: the next call() asks for one
          if (result.value("cancel_reason", "").find("Unauthenticated") != std::string::npos) token_.clear();
          more = false;
        } else if (result.contains("events")) {
          more = events(result);
        }
      }
      return more && std::chrono::steady_clock::now() < deadline;
    };
    c.send(req);
    if (answered) return true;  // it watched: until told to stop, or for its time
  }
  return false;
}

}  // namespace gpool::allocator
