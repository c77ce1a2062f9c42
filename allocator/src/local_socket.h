// gpool-allocator's local Unix socket: the API's routes (registered on this httplib server like on the TCP
// one) served to local users, whom the kernel names (SO_PEERCRED), so they need no credential at all.
#pragma once

#include <sys/types.h>

#include <httplib.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "gpool/peer_connections.h"
#include "request_gate.h"

namespace gpool::allocator {

class LocalSocketServer : public httplib::Server {
 public:
  ~LocalSocketServer() override;
  // Serves the routes on the Unix socket at `path` (replacing a stale socket file; mode 0666, since a
  // connection is identified, not trusted by who may open it), like the TCP listener: its connections
  // wait for their requests in a request gate (request_gate.h), and are answered on a pool of threads;
  // `limits` says the bytes of answers not read yet held for them at most (unread_answers.h) and each local
  // user's share of the CPU (client_cpu.h). Throws when it cannot.
  void listenLocal(const std::string& path, const RequestGate::Options& limits);
  void stopLocal();  // closes the connections waiting, and waits for the answers being given

  // The uid that sent a request over the local socket; nullopt for a request over TCP.
  static std::optional<uid_t> peerUid(const httplib::Request& req);

  static constexpr size_t kMaxLocalConnections = 256, kMaxPerUser = kMaxLocalConnections / 4;
  gpool::PeerConnections& peers() { return *peers_; }  // what one user holds, and what was refused or cut off
  uint64_t displaced() const { return gate_ ? gate_->displaced() : 0; }
  uint64_t dropped() const { return gate_ ? gate_->dropped() : 0; }
  uint64_t heldBack() const { return gate_ ? gate_->heldBack() : 0; }

 private:
  int listen_fd_ = -1;
  std::string path_;
  std::shared_ptr<gpool::PeerConnections> peers_ = std::make_shared<gpool::PeerConnections>(kMaxPerUser);
  std::unique_ptr<httplib::TaskQueue> pool_;
  std::unique_ptr<RequestGate> gate_;
  std::thread thread_;
};

}  // namespace gpool::allocator
