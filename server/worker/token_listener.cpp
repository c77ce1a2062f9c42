// One-shot listeners guarded by a token (token_listener.h).
#include "token_listener.h"

#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>

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
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && listen(fd, 4) == 0 &&
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
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  port = ntohs(addr.sin_port);
  return fd;
}

// Whether the connection's first bytes, within kTokenWaitMs, are `token`.
bool presents(int fd, const std::vector<uint8_t>& token) {
  timeval tv{TokenListener::kTokenWaitMs / 1000, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::vector<uint8_t> got(token.size());
  bool ok = recv(fd, got.data(), got.size(), MSG_WAITALL) == static_cast<ssize_t>(got.size()) &&
            CRYPTO_memcmp(got.data(), token.data(), got.size()) == 0;
  timeval none{0, 0};  // the channel's owner sets its own bounds
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  return ok;
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
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 4) != 0) {
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

int TokenListener::acceptFd(int timeout_ms, const char* what) {
  if (fd_ < 0) return -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count()) + 1) <= 0) continue;
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    if (!presents(fd, token_)) {
      spdlog::warn("{}: a connection without the right token was refused", what);
      ::close(fd);
      continue;
    }
    close();
    return fd;
  }
  spdlog::warn("{}: nobody connected with the token within {} ms", what, timeout_ms);
  close();
  return -1;
}

}  // namespace gpool::worker
