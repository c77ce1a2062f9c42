#include "displacement_order.h"

namespace gpool::allocator {

void DisplacementOrder::add(int fd, const std::string& peer, Key key) {
  remove(fd);
  Waiting& w = peers_[peer];
  if (!w.empty()) ranks_.erase(rank(peer, w));
  w.emplace(key, fd);
  ranks_.insert(rank(peer, w));
  of_[fd] = {peer, key};
}

void DisplacementOrder::remove(int fd) {
  auto it = of_.find(fd);
  if (it == of_.end()) return;
  const auto& [peer, key] = it->second;
  auto p = peers_.find(peer);
  ranks_.erase(rank(peer, p->second));
  p->second.erase({key, fd});
  if (p->second.empty()) peers_.erase(p);
  else ranks_.insert(rank(peer, p->second));
  of_.erase(it);
}

std::optional<int> DisplacementOrder::next() const {
  if (ranks_.empty()) return std::nullopt;
  return peers_.at(std::get<2>(*ranks_.rbegin())).begin()->second;
}

}  // namespace gpool::allocator
