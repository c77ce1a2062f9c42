// TCP transport on standalone Asio, blocking I/O (one connection per client process or worker).
#include <asio.hpp>

#include <poll.h>

#include "gpool/protocol/transport.h"
#include "gpool/protocol/wire.h"

namespace gpool::proto {
namespace {

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(asio::ip::tcp::socket s) : socket_(std::move(s)) {
    asio::error_code ec;
    socket_.set_option(asio::ip::tcp::no_delay(true), ec);
    // Large buffers keep bulk copies streaming on loopback and fast links.
    socket_.set_option(asio::socket_base::send_buffer_size(8 << 20), ec);
    socket_.set_option(asio::socket_base::receive_buffer_size(8 << 20), ec);
    auto ep = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("tcp ?") : "tcp " + ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void send(std::span<const ConstBuffer> buffers) override {
    std::array<asio::const_buffer, 8> bufs;
    size_t n = 0;
    for (const auto& b : buffers) {
      if (n == bufs.size()) throw TransportError("too many buffers in one send");
      bufs[n++] = asio::const_buffer(b.data, b.size);
    }
    asio::error_code ec;
    asio::write(socket_, std::span(bufs.data(), n), ec);
    if (ec) throw TransportError("send to " + peer_ + " failed: " + ec.message());
  }

  void recv(void* data, size_t n) override {
    asio::error_code ec;
    asio::read(socket_, asio::buffer(data, n), ec);
    if (ec) throw TransportError(ec == asio::error::eof ? "connection closed by " + peer_
                                                        : "receive from " + peer_ + " failed: " + ec.message());
  }

  void shutdown() override {
    asio::error_code ec;
    socket_.shutdown(asio::socket_base::shutdown_both, ec);
  }

  std::string peer() const override { return peer_; }

 private:
  asio::ip::tcp::socket socket_;
  std::string peer_;
};

asio::io_context& sharedContext() {
  static asio::io_context io;  // blocking sockets never run it
  return io;
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
