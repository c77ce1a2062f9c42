// gpool-allocator's TCP listener (HTTP, or HTTPS with a certificate), and what one connection may hold.
// httplib accepts and hands each connection to a thread of the ElasticPool; from there this serves it:
// - one client address holds at most its share (gpool/peer_connections.h, --max-connections-per-address);
//   another connection from it is closed at once, and its client tries again;
// - a TLS handshake, then each request, must arrive whole within kRequestDeadline (connection_stream.h);
// - between requests a connection waits at most the keep-alive timeout, and ends when the server stops.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>

#include "gpool/peer_connections.h"

namespace gpool::allocator {

// `Base` is httplib::Server or httplib::SSLServer (whose certificate and key it takes).
template <class Base>
class TcpListener : public Base {
 public:
  template <class... Args>
  explicit TcpListener(std::shared_ptr<gpool::PeerConnections> peers, Args&&... args)
      : Base(std::forward<Args>(args)...), peers_(std::move(peers)) {}
  // Binds HOST:PORT (0: any free port) with a backlog of 4,096 and without SO_REUSEPORT; the port, or -1.
  int bindWide(const std::string& host, int port);
  int fd() const { return this->svr_sock_; }

 private:
  bool process_and_close_socket(socket_t sock) override;  // replaces httplib's; runs on a pool thread
  void serve(int sock);                                    // an admitted connection
  std::shared_ptr<gpool::PeerConnections> peers_;
};

extern template class TcpListener<httplib::Server>;
extern template class TcpListener<httplib::SSLServer>;

}  // namespace gpool::allocator
