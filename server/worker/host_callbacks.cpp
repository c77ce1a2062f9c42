// The host-function channel (host_callbacks.h).
#include "host_callbacks.h"

#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"

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
    close(fd);
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

HostCallbacks::~HostCallbacks() {
  if (listen_fd_ >= 0) close(listen_fd_);
}

proto::Status HostCallbacks::open(uint32_t& port, std::vector<uint8_t>& token) {
  std::lock_guard lock(mu_);
  if (listen_fd_ >= 0 || channel_) return proto::cu::kIllegalState;  // one channel per worker
  token_.resize(16);
  if (RAND_bytes(token_.data(), static_cast<int>(token_.size())) != 1) return proto::cu::kNotInitialized;
  int fd = listenAny(port);
  if (fd < 0) return proto::cu::kNotSupported;
  listen_fd_ = fd;
  token = token_;
  return proto::cu::kSuccess;
}

bool HostCallbacks::accept() {
  if (channel_) return true;
  if (listen_fd_ < 0) return false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAcceptTimeoutMs);
  while (std::chrono::steady_clock::now() < deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count()) + 1) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval tv{5, 0};  // the token comes at once, or this peer is not our client
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::vector<uint8_t> got(token_.size());
    bool ok = recv(fd, got.data(), got.size(), MSG_WAITALL) == static_cast<ssize_t>(got.size()) &&
              CRYPTO_memcmp(got.data(), token_.data(), got.size()) == 0;
    if (!ok) {
      spdlog::warn("host-function channel: a connection without the right token was refused");
      close(fd);
      continue;
    }
    timeval none{0, 0};  // from now on the client's callbacks take as long as they take
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    channel_ = proto::adoptTcpSocket(fd);
    close(listen_fd_);
    listen_fd_ = -1;
    return true;
  }
  spdlog::warn("host-function channel: the client did not connect within {} ms", kAcceptTimeoutMs);
  close(listen_fd_);
  listen_fd_ = -1;
  return false;
}

bool HostCallbacks::run(uint64_t id) {
  std::lock_guard lock(mu_);
  if (!accept()) return false;
  try {
    proto::sendFrame(*channel_, proto::kMsgHostFuncDue, 0, id, &id, sizeof id);
    std::vector<uint8_t> payload;
    proto::FrameHeader h = proto::recvFrame(*channel_, payload, sizeof id);
    uint64_t done = 0;
    if (h.msg != proto::kMsgHostFuncDue || !(h.flags & proto::kIsReply) || payload.size() != sizeof done)
      throw proto::ProtocolError("unexpected frame on the host-function channel");
    std::memcpy(&done, payload.data(), sizeof done);
    if (done != id) throw proto::ProtocolError("host function " + std::to_string(done) + " returned, " + std::to_string(id) + " was due");
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("host-function channel closed: {}; later host functions are skipped", e.what());
    channel_.reset();
    return false;
  }
}

}  // namespace gpool::worker
