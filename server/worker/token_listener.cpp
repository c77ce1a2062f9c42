// One-shot listeners guarded by a token (token_listener.h).
#include "token_listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <utility>

#include "gpool/protocol/shm_transport.h"

namespace gpool::worker {

namespace {

// A listening socket on a free port of every address of this host: IPv6 with IPv4 clients arriving as
// mapped addresses, or IPv4 alone where the host has no IPv6. -1 when neither works.
int listenAny(uint32_t& port) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int no = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    socklen_t len = sizeof addr;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && listen(fd, TokenListener::kBacklog) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin6_port);
      return fd;
    }
    ::close(fd);
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, TokenListener::kBacklog) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  port = ntohs(addr.sin_port);
  return fd;
}

// A connection accepted and not yet judged: what it has sent of the token so far, and since when.
struct Pending {
  int fd = -1;
  size_t got = 0;
  std::vector<uint8_t> bytes;
  std::chrono::steady_clock::time_point since;
};

// Reads what `p` has sent (it is non-blocking). Returns its descriptor once it presented the whole token;
// -1 otherwise, having closed it (and counted it in `refused`) if it sent anything else or hung up.
int judge(Pending& p, const std::vector<uint8_t>& token, int& refused) {
  ssize_t r = ::recv(p.fd, p.bytes.data() + p.got, token.size() - p.got, 0);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return -1;
  if (r > 0) p.got += static_cast<size_t>(r);
  bool wrong = r <= 0 || CRYPTO_memcmp(p.bytes.data(), token.data(), p.got) != 0;
  if (!wrong && p.got < token.size()) return -1;  // a correct beginning: wait for the rest
  int fd = std::exchange(p.fd, -1);
  if (!wrong) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // the channel's owner uses blocking I/O
    return fd;
  }
  ++refused;
  ::close(fd);
  return -1;
}

// Takes every connection waiting on listener `fd`, keeping at most kMaxPending (the oldest go first).
void takeWaiting(int fd, std::vector<Pending>& pending, size_t token_bytes, int& refused) {
  int c;
  while ((c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
    if (pending.size() >= TokenListener::kMaxPending) {
      ::close(pending.front().fd);
      pending.erase(pending.begin());
      ++refused;
    }
    pending.push_back(Pending{c, 0, std::vector<uint8_t>(token_bytes), std::chrono::steady_clock::now()});
  }
  // Out of descriptors: the connection stays queued, and the listener readable; back off, not spin.
  if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace

TokenListener::~TokenListener() { close(); }

void TokenListener::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

proto::Status TokenListener::open(uint32_t& port, std::vector<uint8_t>& token, size_t bytes) {
  close();
  token_.resize(bytes);
  if (RAND_bytes(token_.data(), static_cast<int>(token_.size())) != 1) return proto::cu::kNotInitialized;
  fd_ = listenAny(port);
  if (fd_ < 0) return proto::cu::kNotSupported;
  token = token_;
  return proto::cu::kSuccess;
}

proto::Status TokenListener::openLocal(std::string& name, std::vector<uint8_t>& token) {
  close();
  token_.resize(16);
  std::vector<uint8_t> random(16);
  if (RAND_bytes(token_.data(), 16) != 1 || RAND_bytes(random.data(), 16) != 1) return proto::cu::kNotInitialized;
  static const char* digits = "0123456789abcdef";
  name = "gpool-";
  for (uint8_t b : random) name += {digits[b >> 4], digits[b & 15]};
  sockaddr_un addr;
  socklen_t len = 0;
  proto::abstractSocketAddress(name, addr, len);  // 38 characters: always fits
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, kBacklog) != 0) {
    close();
    return proto::cu::kNotSupported;
  }
  token = token_;
  return proto::cu::kSuccess;
}

std::unique_ptr<proto::Transport> TokenListener::accept(int timeout_ms, const char* what) {
  int fd = acceptFd(timeout_ms, what);
  return fd < 0 ? nullptr : proto::adoptTcpSocket(fd);
}

// Every connection is judged as its bytes come, side by side: one that says nothing, or too little, holds
// up no other, and is dropped after kTokenWaitMs; the first to present the whole token is taken.
int TokenListener::acceptFd(int timeout_ms, const char* what) {
  if (fd_ < 0) return -1;
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::vector<Pending> pending;
  int chosen = -1, refused = 0;
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  for (auto now = Clock::now(); chosen < 0 && now < deadline && !cancelled_; now = Clock::now()) {
    std::vector<pollfd> polls{{fd_, POLLIN, 0}};
    for (const Pending& p : pending) polls.push_back({p.fd, POLLIN, 0});
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    if (::poll(polls.data(), polls.size(), static_cast<int>(std::min<int64_t>(left, 100))) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < pending.size() && chosen < 0; ++i)
      if (polls[i + 1].revents) chosen = judge(pending[i], token_, refused);
    for (Pending& p : pending)
      if (p.fd >= 0 && Clock::now() - p.since > std::chrono::milliseconds(kTokenWaitMs)) {
        ::close(std::exchange(p.fd, -1));  // silent too long
        ++refused;
      }
    std::erase_if(pending, [](const Pending& p) { return p.fd < 0; });
    if (chosen < 0 && (polls[0].revents & POLLIN)) takeWaiting(fd_, pending, token_.size(), refused);
  }
  for (const Pending& p : pending) ::close(p.fd);
  close();
  if (refused) spdlog::warn("{}: refused {} connection(s) without the right token", what, refused);
  if (chosen < 0) spdlog::warn("{}: nobody connected with the token within {} ms", what, timeout_ms);
  return chosen;
}

}  // namespace gpool::worker
