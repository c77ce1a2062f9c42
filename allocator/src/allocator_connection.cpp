#include "allocator_connection.h"

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
  size_t from = current_;
  bool named = !leader.empty() && leader != " " && leader != urls_[current_];
  try {
    current_ = named ? indexOf(leader) : (current_ + 1) % urls_.size();
  } catch (const std::invalid_argument&) {  // a leader URL this client cannot use
    current_ = (from + 1) % urls_.size();
  }
  ++tried_;
  return tried_ <= urls_.size() + (named ? 1 : 0);  // every replica, and a leader named on the way
}

std::string AllocatorReplicas::all() const {
  std::string out;
  for (const auto& u : urls_) out += (out.empty() ? "" : ",") + u;
  return out;
}

}  // namespace gpool::token
