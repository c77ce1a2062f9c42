#include "unread_answers.h"

#include <algorithm>

namespace gpool::allocator {

void UnreadAnswers::set(int fd, const std::string& peer, int64_t since, size_t bytes) {
  remove(fd);
  if (bytes == 0) return;
  of_.emplace(fd, Held{peer, since, bytes});
  by_peer_[peer] += bytes;
  held_ += bytes;
}

void UnreadAnswers::remove(int fd) {
  auto it = of_.find(fd);
  if (it == of_.end()) return;
  auto peer = by_peer_.find(it->second.peer);
  if ((peer->second -= it->second.bytes) == 0) by_peer_.erase(peer);
  held_ -= it->second.bytes;
  of_.erase(it);
}

// Looked for only past the budget (rarely): a scan is cheap enough then.
std::optional<int> UnreadAnswers::over() const {
  if (held_ <= budget_) return std::nullopt;
  auto most = std::max_element(by_peer_.begin(), by_peer_.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  std::optional<int> oldest;
  int64_t since = 0;
  for (const auto& [fd, h] : of_) {
    if (h.peer != most->first || (oldest && (h.since > since || (h.since == since && fd > *oldest)))) continue;
    oldest = fd;
    since = h.since;
  }
  return oldest;
}

std::vector<int> UnreadAnswers::holding() const {
  std::vector<int> fds;
  fds.reserve(of_.size());
  for (const auto& [fd, h] : of_) fds.push_back(fd);
  return fds;
}

}  // namespace gpool::allocator
