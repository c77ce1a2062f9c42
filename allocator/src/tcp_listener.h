// gpool-allocator's TCP listener: HTTP, or HTTPS with a certificate. Its connections wait in the request
// gate (request_gate.h) without a thread; each whole request is answered on a thread of the pool
// (elastic_pool.h) by httplib's request processing, with the routes registered on routes().
#pragma once

#include <httplib.h>

#include <cstdint>
#include <memory>
#include <string>

#include "gpool/peer_connections.h"
#include "request_gate.h"

namespace gpool::allocator {

class TcpListener {
 public:
  // HTTPS with `cert` and `key` (PEM files) when `cert` is given; check valid().
  TcpListener(std::shared_ptr<PeerConnections> peers, const std::string& cert, const std::string& key);
  ~TcpListener();
  bool valid() const { return server_->is_valid(); }
  httplib::Server& routes() { return *server_; }  // its new_task_queue makes the pool requests are answered on

  // Binds HOST:PORT (0: any free port) with a backlog of 4,096 and without SO_REUSEPORT, to hold what
  // `limits` says: its max_connections at once (fewer when the open-file limit leaves room for fewer), its
  // max_unread bytes of answers not read yet (unread_answers.h), its client_cpu (client_cpu.h); the port, or -1.
  int bindWide(const std::string& host, int port, const RequestGate::Options& limits);
  int fd() const { return fd_; }
  // Serves until halt() (called before or during it); then lets the answers being given finish (5 s at most).
  void run();
  void halt();
  uint64_t displaced() const { return gate_ ? gate_->displaced() : 0; }  // connections closed for a new one
  uint64_t dropped() const { return gate_ ? gate_->dropped() : 0; }      // answers dropped past max_unread
  uint64_t heldBack() const { return gate_ ? gate_->heldBack() : 0; }    // requests that waited for their client's CPU share

 private:
  class Server;
  std::unique_ptr<httplib::Server> server_;
  std::shared_ptr<PeerConnections> peers_;
  SSL_CTX* tls_ = nullptr;
  int fd_ = -1;
  std::unique_ptr<httplib::TaskQueue> pool_;
  std::unique_ptr<RequestGate> gate_;
};

}  // namespace gpool::allocator
