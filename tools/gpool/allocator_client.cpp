#include "allocator_client.h"

#include <munge.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "gpool/allocator/allocator_connection.h"
#include "gpool/allocator/signed_request.h"

namespace gpool::cli {
namespace {

constexpr int kTimeoutMs = 15000;  // connect, and each read or write (a long poll answers within 5 s)

// A MUNGE credential carrying `payload`, or "" with `why` set.
std::string mungeCredential(const std::string& socket, const std::string& payload, std::string& why) {
  munge_ctx_t ctx = munge_ctx_create();
  if (!ctx) return why = "out of memory", "";
  if (!socket.empty()) munge_ctx_set(ctx, MUNGE_OPT_SOCKET, socket.c_str());
  char* cred = nullptr;
  munge_err_t err = munge_encode(&cred, ctx, payload.data(), static_cast<int>(payload.size()));
  std::string out = cred ? cred : "";
  if (err != EMUNGE_SUCCESS)
    why = std::string("cannot get a MUNGE credential (") + munge_ctx_strerror(ctx) +
          "): start munged on this host, set GPOOL_MUNGE_SOCKET, use a service account's key (GPOOL_SERVICE_KEY_FILE), "
          "or reach the allocator's local socket (GPOOL_ALLOCATOR=unix:PATH)";
  std::free(cred);
  munge_ctx_destroy(ctx);
  return err == EMUNGE_SUCCESS ? out : "";
}

bool waitFor(int fd, short events) {
  pollfd p{fd, events, 0};
  int r;
  do r = ::poll(&p, 1, kTimeoutMs);
  while (r < 0 && errno == EINTR);
  return r > 0;
}

}  // namespace

AllocatorClient::AllocatorClient(std::string url, const std::string& ca_file) : url_(std::move(url)), ca_file_(ca_file) {
  if (url_.empty())
    throw std::invalid_argument("no allocator: set GPOOL_ALLOCATOR=http(s)://HOST:PORT or unix:PATH (or pass --allocator)");
  if (url_.rfind("unix:", 0) == 0) {
    socket_path_ = url_.substr(5);
    if (socket_path_.empty() || socket_path_.size() >= sizeof(sockaddr_un::sun_path))
      throw std::invalid_argument("GPOOL_ALLOCATOR=unix:PATH needs the path of the allocator's socket");
    return;
  }
  replicas_ = std::make_unique<token::AllocatorReplicas>(url_, ca_file, kTimeoutMs / 1000);
}

std::unique_ptr<AllocatorClient> AllocatorClient::another() const {
  auto c = std::make_unique<AllocatorClient>(url_, ca_file_);
  c->admin_key = admin_key;
  c->service_key = service_key;
  c->munge_socket = munge_socket;
  c->lease_key = lease_key;
  return c;
}

bool AllocatorClient::proofHeaders(const std::string& method, const std::string& path, const std::string& body, Proof proof,
                                   httplib::Headers& h, std::string& why) {
  std::string bare = path.substr(0, path.find('?'));  // what the allocator sees as the path
  if (proof == Proof::kLease && !lease_key.empty()) {
    h.emplace("X-Gpool-Lease-Key", lease_key);
    return true;
  }
  if (proof == Proof::kNone) return true;
  if (!admin_key.empty()) {
    for (auto& [name, value] : token::signRequest(admin_key, method, bare, body)) h.emplace(name, value);
  } else if (!service_key.empty()) {
    h.emplace("Authorization", "Bearer " + service_key);
  } else if (socket_path_.empty()) {
    std::string cred = mungeCredential(munge_socket, token::mungePayload(method, bare, body), why);
    if (cred.empty()) return false;
    h.emplace("Authorization", "MUNGE " + cred);
  }
  return true;
}

std::pair<int, std::string> AllocatorClient::call(const std::string& method, const std::string& path, Proof proof,
                                                  const std::string& body, const char* type) {
  std::string why;
  if (!socket_path_.empty()) {
    httplib::Headers h;
    if (!proofHeaders(method, path, body, proof, h, why)) return {kNoProof, why};
    return overUnixSocket(method, path, h, body, type);
  }
  bool proven = true;
  std::vector<std::pair<std::string, std::string>> seen;  // each replica asked that did not lead, and what it said
  httplib::Result r = replicas_->ask(
      [&](httplib::Client& http) {
        httplib::Headers h;  // made again for each replica asked
        if (!(proven = proofHeaders(method, path, body, proof, h, why))) return httplib::Result(nullptr, httplib::Error::Unknown);
        return method == "GET"    ? http.Get(path.c_str(), h)
               : method == "POST" ? http.Post(path.c_str(), h, body, type)
               : method == "PUT"  ? http.Put(path.c_str(), h, body, type)
                                  : http.Delete(path.c_str(), h);
      },
      [&](const std::string& url, const std::string& said) {
        if (std::none_of(seen.begin(), seen.end(), [&](const auto& s) { return s.first == url; })) seen.emplace_back(url, said);
      });
  if (!proven) return {kNoProof, why};
  if (r) sayHeld(r->get_header_value(token::kHeldHeader));
  if (r && token::standbyLeader(r->status, r->body).empty()) return {r->status, r->body};
  if (replicas_->size() == 1 && !r) {
    const std::string& at = replicas_->url();
    std::string hint = r.error() == httplib::Error::SSLServerVerification
                           ? ": its certificate does not verify; give the CA that signed it with GPOOL_CA_FILE or --ca-file"
                       : r.error() == httplib::Error::Read && at.rfind("http://", 0) == 0
                           ? "; if the allocator serves HTTPS (--tls-cert), use https://"
                           : "";
    return {0, "cannot reach gpool-allocator at " + at + " (" + httplib::to_string(r.error()) + ")" + hint};
  }
  std::string all;
  for (const auto& [url, what] : seen) all += (all.empty() ? "" : "; ") + url + " " + what;
  return {0, "no allocator replica leads now (" + all + "): a failover takes a few seconds"};
}

// One request per connection (Connection: close): the answer is everything up to the end of the stream.
std::pair<int, std::string> AllocatorClient::overUnixSocket(const std::string& method, const std::string& path,
                                                            const httplib::Headers& h, const std::string& body,
                                                            const char* type) {
  auto unreachable = [&](const std::string& what) {
    return std::pair<int, std::string>{0, "cannot reach gpool-allocator at " + url_ + " (" + what + ")"};
  };
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return unreachable(std::strerror(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd);
    return unreachable(why);
  }
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n";
  for (const auto& [name, value] : h) request += name + ": " + value + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT")
    request += std::string("Content-Type: ") + type + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  request += "\r\n" + body;
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = waitFor(fd, POLLOUT) ? ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL) : -1;
    if (n <= 0 && errno != EINTR) {
      ::close(fd);
      return unreachable("sending: " + std::string(std::strerror(errno)));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string answer;
  char buf[16384];
  for (;;) {
    ssize_t n = waitFor(fd, POLLIN) ? ::recv(fd, buf, sizeof buf, 0) : -1;
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || answer.size() > (16u << 20)) {
      ::close(fd);
      return unreachable("no complete answer");
    }
    answer.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  size_t head_end = answer.find("\r\n\r\n");
  int status = 0;
  if (answer.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos || std::sscanf(answer.c_str() + 8, " %d", &status) != 1)
    return unreachable("a malformed answer");
  sayHeld(headerValue(answer.substr(0, head_end), token::kHeldHeader));
  return {status, answer.substr(head_end + 4)};
}

// The value of header `name` in an answer's `head` (names compared without case), or "".
std::string AllocatorClient::headerValue(const std::string& head, const std::string& name) {
  for (size_t at = head.find("\r\n"); at != std::string::npos; at = head.find("\r\n", at + 2)) {
    size_t start = at + 2, colon = head.find(':', start), end = std::min(head.find("\r\n", start), head.size());
    if (colon >= end || colon - start != name.size() || strncasecmp(head.c_str() + start, name.c_str(), name.size()) != 0) continue;
    size_t value = head.find_first_not_of(' ', colon + 1);
    return value < end ? head.substr(value, end - value) : "";
  }
  return "";
}

// Says once (for this process) that the allocator held a request past a second for this host's (or
// user's) share of its CPU: `held_ms` is its answer's kHeldHeader.
void AllocatorClient::sayHeld(const std::string& held_ms) {
  static std::atomic<bool> said{false};
  long ms = std::strtol(held_ms.c_str(), nullptr, 10);
  if (ms < 1000 || said.exchange(true)) return;
  std::fprintf(stderr,
               "gpool: the allocator held a request %.1fs: this host (or, over its local socket, this user) asked it for "
               "more than its share of the allocator's CPU (--max-client-cpu, or its part of --max-client-cpu-total while "
               "many clients ask at once); requests wait their turn meanwhile. If this host runs many jobs, ask the "
               "allocator's admin to raise the share\n",
               static_cast<double>(ms) / 1000);
}

}  // namespace gpool::cli
