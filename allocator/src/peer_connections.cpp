#include "peer_connections.h"

#include <spdlog/spdlog.h>

namespace gpool::allocator {

bool PeerConnections::admit(const std::string& peer) {
  std::lock_guard lock(mu_);
  size_t& held = held_[peer];
  if (held < per_peer_) return ++held, true;
  ++refused;
  auto now = std::chrono::steady_clock::now();
  if (now - last_warned_ >= std::chrono::seconds(10)) {  // a crowd would otherwise fill the log
    last_warned_ = now;
    spdlog::warn("closed a connection from {}: it holds {} already ({}); {} closed so far", peer, held, what_, refused.load());
  }
  return false;
}

void PeerConnections::release(const std::string& peer) {
  std::lock_guard lock(mu_);
  auto it = held_.find(peer);
  if (it != held_.end() && --it->second == 0) held_.erase(it);
}

}  // namespace gpool::allocator
