#include "tcp_listener.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <type_traits>

#include "elastic_pool.h"

namespace gpool::allocator {

// httplib's server (plain or TLS) with its request processing and listening socket in reach.
class TcpListener::Server {
 public:
  template <class Base>
  class Of : public Base {
   public:
    using Base::Base;
    bool answer(ConnectionStream& stream, bool last) {
      bool closed = false;
      return this->process_request(stream, last, closed, nullptr) && !closed;
    }
    int listenFd() const { return this->svr_sock_; }
    size_t keepAliveRequests() const { return this->keep_alive_max_count_; }
    std::chrono::seconds keepAlive() const { return std::chrono::seconds(this->keep_alive_timeout_sec_); }
  };
  using Plain = Of<httplib::Server>;
  using Tls = Of<httplib::SSLServer>;
};

TcpListener::TcpListener(std::shared_ptr<PeerConnections> peers, const std::string& cert, const std::string& key)
    : peers_(std::move(peers)) {
  if (cert.empty()) {
    server_ = std::make_unique<Server::Plain>();
    return;
  }
  auto tls = std::make_unique<Server::Tls>(cert.c_str(), key.c_str());
  tls_ = tls->ssl_context();
  server_ = std::move(tls);
}

TcpListener::~TcpListener() {
  gate_.reset();
  pool_.reset();
  if (fd_ >= 0) ::close(fd_);
}

int TcpListener::bindWide(const std::string& host, int port, const RequestGate::Options& limits) {
  // httplib listens with a backlog of 5 (compiled into Debian's library): a burst of connections then
  // waits a second for the kernel's SYN retry. And httplib sets SO_REUSEPORT, with which a second
  // allocator started on the same port binds it too and the kernel splits the clients between the two:
  // only SO_REUSEADDR here (a restart still binds at once), so it fails instead.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  int bound = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound < 0) return -1;
  fd_ = tls_ ? static_cast<Server::Tls&>(*server_).listenFd() : static_cast<Server::Plain&>(*server_).listenFd();
  ::listen(fd_, 4096);
  pool_.reset(server_->new_task_queue());
  RequestGate::Options opt = limits;
  opt.max_connections = std::min(limits.max_connections, RequestGate::descriptorBudget());
  opt.tls = tls_;
  RequestGate::Answer answer;
  auto settings = [&](auto& s) {
    opt.keep_alive = s.keepAlive();
    opt.keep_alive_requests = s.keepAliveRequests();
    answer = [&s](ConnectionStream& stream, bool last) { return s.answer(stream, last); };
  };
  if (tls_) settings(static_cast<Server::Tls&>(*server_));
  else settings(static_cast<Server::Plain&>(*server_));
  gate_ = std::make_unique<RequestGate>(fd_, peers_, *pool_, opt, answer);
  return bound;
}

void TcpListener::run() {
  gate_->run();
  pool_->shutdown();  // the answers being given end, before the gate they come back to
}

void TcpListener::halt() {
  if (gate_) gate_->stop();
}

}  // namespace gpool::allocator
