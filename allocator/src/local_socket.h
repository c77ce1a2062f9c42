// gpool-allocator's local Unix socket: the API's routes (registered on this httplib server like on the TCP
// one) served to local users, whom the kernel names (SO_PEERCRED), so they need no credential at all.
#pragma once

#include <sys/types.h>

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "gpool/peer_connections.h"

namespace gpool::allocator {

class LocalSocketServer : public httplib::Server {
 public:
  ~LocalSocketServer() override;
  // Serves the routes on the Unix socket at `path` (replacing a stale socket file; mode 0666, since a
  // connection is identified, not trusted by who may open it). Throws when it cannot.
  void listenLocal(const std::string& path);
  void stopLocal();  // also closes the connections in progress, and waits for them

  // The uid that sent a request over the local socket; nullopt for a request over TCP.
  static std::optional<uid_t> peerUid(const httplib::Request& req);

  static constexpr int kMaxLocalConnections = 256, kMaxPerUser = kMaxLocalConnections / 4;
  gpool::PeerConnections& peers() { return peers_; }  // what one user holds, and what was refused or cut off

 private:
  void acceptLoop();
  void serve(int fd, const std::string& peer);  // peer: kPeerPrefix and the uid

  int listen_fd_ = -1;
  std::string path_;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;  // connections being served (under mu_)
  gpool::PeerConnections peers_{kMaxPerUser};
};

}  // namespace gpool::allocator
