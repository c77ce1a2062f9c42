#include "gpool/allocator/allocator_connection.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <stdexcept>

namespace gpool::token {

std::unique_ptr<httplib::Client> allocatorClient(const std::string& url, const std::string& ca_file, int read_timeout_s) {
  bool tls = url.rfind("https://", 0) == 0;
  if (!tls && url.rfind("http://", 0) != 0)
    throw std::invalid_argument("the allocator's URL must be http://HOST:PORT or https://HOST:PORT, not '" + url + "'");
  if (!ca_file.empty() && ::access(ca_file.c_str(), R_OK) != 0)
    throw std::invalid_argument("cannot read the CA file " + ca_file);
  auto cli = std::make_unique<httplib::Client>(url);
  if (tls) {
    cli->enable_server_certificate_verification(true);
    if (!ca_file.empty()) cli->set_ca_cert_path(ca_file.c_str());
  }
  cli->set_connection_timeout(3, 0);
  cli->set_read_timeout(read_timeout_s, 0);
  cli->set_tcp_nodelay(true);
  return cli;
}

std::string standbyLeader(int status, const std::string& body) {
  if (status != 503) return "";
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.value("standby", false)) return "";
  std::string leader = j.contains("leader") && j["leader"].is_string() ? j["leader"].get<std::string>() : "";
  return leader.empty() ? " " : leader;  // " ": a standby that knows no leader yet
}

AllocatorReplicas::AllocatorReplicas(const std::string& urls, std::string ca_file, int read_timeout_s)
    : ca_file_(std::move(ca_file)), read_timeout_s_(read_timeout_s) {
  for (size_t start = 0; start <= urls.size();) {
    size_t comma = urls.find(',', start);
    std::string url = urls.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!url.empty() && url.back() == '/') url.pop_back();
    if (!url.empty()) indexOf(url);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (urls_.empty()) throw std::invalid_argument("no allocator URL given (http(s)://HOST:PORT, or several, comma-separated)");
}

size_t AllocatorReplicas::indexOf(const std::string& url) {
  for (size_t i = 0; i < urls_.size(); ++i)
    if (urls_[i] == url) return i;
  clients_.push_back(allocatorClient(url, ca_file_, read_timeout_s_));
  urls_.push_back(url);
  return urls_.size() - 1;
}

bool AllocatorReplicas::next(const std::string& leader) {
  asked_.resize(urls_.size());
  asked_[current_] = true;
  // A leader named over https is followed only over https: a misconfigured --advertise must not make
  // clients send their credentials in the clear.
  auto scheme = [](const std::string& url) { return url.substr(0, url.find("://")); };
  if (!leader.empty() && leader != " " && scheme(leader) == scheme(urls_[current_])) {
    try {
      size_t i = indexOf(leader);
      asked_.resize(urls_.size());
      if (!asked_[i]) return current_ = i, true;
    } catch (const std::invalid_argument&) {  // a leader URL this client cannot use
    }
  }
  for (size_t step = 1; step <= urls_.size(); ++step)  // the next replica not asked in this round
    if (size_t i = (current_ + step) % urls_.size(); !asked_[i]) return current_ = i, true;
  return false;
}

httplib::Result AllocatorReplicas::ask(const std::function<httplib::Result(httplib::Client&)>& send,
                                       const std::function<void(const std::string&, const std::string&)>& passed_over) {
  startRound();
  for (;;) {
    httplib::Result r = send(client());
    std::string leader = r ? standbyLeader(r->status, r->body) : "";
    if (r && leader.empty()) return r;
    if (passed_over)
      passed_over(url(), r ? (leader == " " ? "stands by, no leader yet" : "stands by for " + leader)
                           : "does not answer (" + httplib::to_string(r.error()) + ")");
    if (!next(leader)) return r;
  }
}

std::string AllocatorReplicas::all() const {
  std::string out;
  for (const auto& u : urls_) out += (out.empty() ? "" : ",") + u;
  return out;
}

}  // namespace gpool::token
