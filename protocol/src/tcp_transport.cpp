// TCP transport on standalone Asio, blocking I/O (one connection per client process or worker).
#include <asio.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "gpool/protocol/transport.h"
#include "wait_polling.h"
#include "gpool/protocol/wire.h"

namespace gpool::proto {
namespace {

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(asio::ip::tcp::socket s) : socket_(std::move(s)) {
    // Blocking I/O: a socket handed over from an asynchronous acceptor arrives non-blocking.
    int fd = socket_.native_handle(), flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_NONBLOCK)) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    asio::error_code ec;
    socket_.set_option(asio::ip::tcp::no_delay(true), ec);
    // Large buffers keep bulk copies streaming on loopback and fast links.
    socket_.set_option(asio::socket_base::send_buffer_size(8 << 20), ec);
    socket_.set_option(asio::socket_base::receive_buffer_size(8 << 20), ec);
    auto ep = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("tcp ?") : "tcp " + ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void send(std::span<const ConstBuffer> buffers) override {
    std::array<iovec, 8> iov;
    size_t n = 0;
    for (const auto& b : buffers) {
      if (n == iov.size()) throw TransportError("too many buffers in one send");
      iov[n++] = iovec{const_cast<void*>(b.data), b.size};
    }
    msghdr m{};
    m.msg_iov = iov.data();
    m.msg_iovlen = n;
    int heard = -1;  // bytes received and unread when a stall began (measured then: no system call per send)
    while (m.msg_iovlen > 0) {
      ssize_t sent = ::sendmsg(socket_.native_handle(), &m, MSG_NOSIGNAL);
      if (sent < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {  // the stall timeout passed without progress
          // A peer too busy to read that still talks to us (a worker's kMsgAlive frames) is alive. The
          // first timeout only takes the measure: a stalled send ends after two timeouts without a word.
          if (int now = unread(); heard < 0 || now > heard) {
            heard = now;
            continue;
          }
          throw TransportStalled(stalled("stopped reading"));
        }
        if (errno == EPIPE || errno == ECONNRESET) throw TransportClosed("connection closed by " + peer_ + " (" + std::strerror(errno) + ")");
        throw TransportError("send to " + peer_ + " failed: " + std::strerror(errno));
      }
      for (auto left = static_cast<size_t>(sent); left > 0;) {  // past what went out
        size_t k = std::min(left, m.msg_iov->iov_len);
        m.msg_iov->iov_base = static_cast<char*>(m.msg_iov->iov_base) + k;
        m.msg_iov->iov_len -= k;
        left -= k;
        if (m.msg_iov->iov_len == 0) ++m.msg_iov, --m.msg_iovlen;
      }
      while (m.msg_iovlen > 0 && m.msg_iov->iov_len == 0) ++m.msg_iov, --m.msg_iovlen;
    }
  }

  // Small reads are served from a buffer that each receive fills with what has arrived, so a run of
  // frames (a batch of launches, a header and its payload) costs one system call, not two per frame;
  // reads of a buffer's size or more go straight to their destination.
  void recv(void* data, size_t n, bool idle_ok = false) override {
    auto* p = static_cast<char*>(data);
    size_t got = takeBuffered(p, n);
    while (got < n) {
      const bool direct = n - got >= kBuffer;
      ssize_t r = direct ? receiveSome(p + got, n - got) : receiveSome(buffer_.get(), kBuffer);
      if (r > 0 && !direct) {
        head_ = 0, tail_ = static_cast<size_t>(r);
        got += takeBuffered(p + got, n - got);
      } else if (r > 0) {
        got += static_cast<size_t>(r);
      } else if (r == 0) {
        throw TransportClosed("connection closed by " + peer_);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {  // the stall timeout passed without a byte
        if (got > 0) throw TransportStalled(stalled("stopped sending mid-frame"));
        if (!idle_ok) throw TransportStalled(stalled("sent nothing"));
      } else if (errno == ECONNRESET) {
        throw TransportClosed("connection reset by " + peer_);
      } else if (errno != EINTR) {
        throw TransportError("receive from " + peer_ + " failed: " + std::strerror(errno));
      }
    }
  }

  void setStallTimeout(int ms) override {
    stall_ms_ = ms;
    timeval tv{ms / 1000, (ms % 1000) * 1000};
    int fd = socket_.native_handle(), on = 1, idle = 60, interval = 10, count = 3;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);  // a vanished host: noticed in about 90 s
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  }

  void shutdown() override {
    asio::error_code ec;
    socket_.shutdown(asio::socket_base::shutdown_both, ec);
  }

  std::string peer() const override { return peer_; }
  int liveness() const override { return const_cast<asio::ip::tcp::socket&>(socket_).native_handle(); }

 private:
  static constexpr size_t kBuffer = 64 << 10;
  // Copies up to n buffered bytes to p; returns how many.
  size_t takeBuffered(char* p, size_t n) {
    size_t k = std::min(n, tail_ - head_);
    std::memcpy(p, buffer_.get() + head_, k);
    head_ += k;
    return k;
  }
  // One receive of what has arrived. When nothing has, it polls for a while first (wait_polling.h) and
  // only then blocks.
  ssize_t receiveSome(char* p, size_t n) {
    using Clock = WaitPolling::Clock;
    const int fd = socket_.native_handle();
    auto arrived = [](ssize_t r) { return r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK); };
    if (ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT); arrived(r)) return r;
    const auto start = Clock::now();
    const auto budget = polling_.budget();
    while (Clock::now() - start < budget) {
      if (ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT); arrived(r)) {
        polling_.waited(Clock::now() - start);
        return r;
      }
      std::this_thread::yield();
    }
    ssize_t r = ::recv(fd, p, n, 0);  // blocks until the stall timeout (EAGAIN then)
    polling_.waited(Clock::now() - start);
    return r;
  }
  // Bytes received and not yet read (buffered here, or still the kernel's).
  int unread() {
    int n = 0;
    return (::ioctl(socket_.native_handle(), FIONREAD, &n) == 0 ? n : 0) + static_cast<int>(tail_ - head_);
  }
  std::string stalled(const char* what) const {
    return peer_ + " " + what + " for " + std::to_string(stall_ms_) + " ms (the stall timeout)";
  }
  int stall_ms_ = 0;
  WaitPolling polling_;
  std::unique_ptr<char[]> buffer_ = std::make_unique<char[]>(kBuffer);
  size_t head_ = 0, tail_ = 0;  // buffer_[head_, tail_) is received and not yet read
  asio::ip::tcp::socket socket_;
  std::string peer_;
};

// Blocking sockets never run it. Never destroyed: a socket may close after the process began to exit (the
// client library's host-function channels are served by detached threads), and closing one uses it.
asio::io_context& sharedContext() {
  static asio::io_context* io = new asio::io_context;
  return *io;
}

}  // namespace

bool parseHostPort(const std::string& address, std::string& host, uint16_t& port) {
  if (address.empty() || address.size() > kMaxStringBytes) return false;
  std::string rest = address;
  port = kDefaultPort;
  std::string port_text;
  if (rest.front() == '[') {  // [v6]:port
    auto close = rest.find(']');
    if (close == std::string::npos) return false;
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return false;
      port_text = rest.substr(close + 2);
    }
  } else {
    auto colon = rest.rfind(':');
    host = rest.substr(0, colon);
    if (colon != std::string::npos) port_text = rest.substr(colon + 1);
  }
  if (host.empty()) return false;
  if (!port_text.empty() || address.back() == ':') {
    if (port_text.empty() || port_text.size() > 5) return false;
    unsigned long p = 0;
    for (char c : port_text) {
      if (c < '0' || c > '9') return false;
      p = p * 10 + static_cast<unsigned long>(c - '0');
    }
    if (p > 65535) return false;  // 0 is valid for listening (any free port), refused for connecting
    port = static_cast<uint16_t>(p);
  }
  return true;
}

std::unique_ptr<Transport> connectTcp(const std::string& address, int timeout_ms) {
  std::string host;
  uint16_t port = 0;
  if (!parseHostPort(address, host, port) || port == 0)
    throw TransportError("malformed server address '" + address + "' (expected HOST:PORT)");
  asio::error_code ec;
  asio::ip::tcp::resolver resolver(sharedContext());
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) throw TransportError("cannot resolve " + address + ": " + ec.message());
  asio::ip::tcp::socket socket(sharedContext());
  // Connect with a deadline: a non-blocking connect polled for writability.
  for (const auto& ep : endpoints) {
    socket.close(ec);
    socket.open(ep.endpoint().protocol(), ec);
    if (ec) continue;
    // Not inherited by a program the client's process execs: its end would keep the connection open for
    // the worker after this process has gone.
    ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
    socket.non_blocking(true, ec);
    socket.connect(ep.endpoint(), ec);
    if (ec == asio::error::in_progress || ec == asio::error::would_block) {
      pollfd pfd{socket.native_handle(), POLLOUT, 0};
      if (::poll(&pfd, 1, timeout_ms) != 1) {
        ec = asio::error::timed_out;
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len);
      ec = err ? asio::error_code(err, asio::system_category()) : asio::error_code();
    }
    if (!ec) {
      socket.non_blocking(false, ec);
      return std::make_unique<TcpTransport>(std::move(socket));
    }
  }
  throw TransportError("cannot connect to gpool-server at " + address + ": " + ec.message());
}

std::unique_ptr<Transport> adoptTcpSocket(int fd) {
  asio::ip::tcp::socket socket(sharedContext());
  asio::error_code ec;
  socket.assign(asio::ip::tcp::v4(), fd, ec);  // protocol only matters for option levels
  if (ec) throw TransportError("cannot adopt socket " + std::to_string(fd) + ": " + ec.message());
  return std::make_unique<TcpTransport>(std::move(socket));
}

}  // namespace gpool::proto
