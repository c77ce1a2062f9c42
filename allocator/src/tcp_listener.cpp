#include "tcp_listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <type_traits>

#include <spdlog/spdlog.h>

#include "connection_stream.h"

namespace gpool::allocator {
namespace {

// The server's half of a TLS handshake on `fd`, by `by`; nullptr when it failed, or took too long
// (`*late` then says so).
SSL* acceptTls(SSL_CTX* ctx, int fd, ConnectionStream::Clock::time_point by, bool* late) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  SSL* ssl = ctx ? SSL_new(ctx) : nullptr;
  if (!ssl || SSL_set_fd(ssl, fd) != 1) return SSL_free(ssl), nullptr;
  for (;;) {
    int r = SSL_accept(ssl);
    if (r == 1) return ssl;
    short want = ConnectionStream::wanted(ssl, r);
    if (!want || ConnectionStream::Clock::now() >= by ||
        !ConnectionStream::ready(fd, want, ConnectionStream::msUntil(by, ConnectionStream::kStepMs))) {
      *late = want != 0;
      SSL_free(ssl);
      return nullptr;
    }
  }
}

}  // namespace

template <class Base>
int TcpListener<Base>::bindWide(const std::string& host, int port) {
  // httplib listens with a backlog of 5 (compiled into Debian's library): a burst of connections then
  // waits a second for the kernel's SYN retry. And httplib sets SO_REUSEPORT, with which a second
  // allocator started on the same port binds it too and the kernel splits the clients between the two:
  // only SO_REUSEADDR here (a restart still binds at once), so it fails instead.
  this->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  int bound = port == 0 ? this->bind_to_any_port(host) : (this->bind_to_port(host, port) ? port : -1);
  if (bound >= 0) ::listen(this->svr_sock_, 4096);
  return bound;
}

template <class Base>
bool TcpListener<Base>::process_and_close_socket(socket_t sock) {
  const std::string address = gpool::PeerConnections::peerOf(ConnectionStream::peerAddress(sock));
  bool admitted = !address.empty() && peers_->admit(address);
  if (!admitted && !address.empty() && peers_->warnNow())
    spdlog::warn("closed a connection from {}: it holds {} already (--max-connections-per-address); {} closed so far",
                 address, peers_->perPeer(), peers_->refused.load());
  if (admitted) {
    serve(sock);
    peers_->release(address);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return admitted;
}

template <class Base>
void TcpListener<Base>::serve(int sock) {
  int yes = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);  // answers go out in several writes
  SSL* ssl = nullptr;
  if constexpr (std::is_same_v<Base, httplib::SSLServer>) {
    bool late = false;
    if (!(ssl = acceptTls(this->ssl_context(), sock, ConnectionStream::Clock::now() + kRequestDeadline, &late))) {
      if (late) ++peers_->cut_off;
      return;
    }
  }
  ConnectionStream stream(sock, ssl);
  auto stopping = [this] { return this->svr_sock_ == INVALID_SOCKET; };
  for (size_t left = this->keep_alive_max_count_; left > 0; --left) {
    if (left != this->keep_alive_max_count_) {
      if (!stream.awaitRequest(this->keep_alive_timeout_sec_, stopping)) break;
      stream.startRequest();
    }
    bool closed = false;
    if (!this->process_request(stream, left == 1 || stopping(), closed, nullptr) || closed) break;
  }
  if (stream.late()) ++peers_->cut_off;
  if (ssl) SSL_shutdown(ssl), SSL_free(ssl);
}

template class TcpListener<httplib::Server>;
template class TcpListener<httplib::SSLServer>;

}  // namespace gpool::allocator
