// Which waiting connection of gpool-allocator gives its place to a new one when every connection is held
// (request_gate.h): one of the client (address, or local user) with the most connections waiting, so a
// crowd displaces its own connections, not a newcomer's; among clients with as many, the one whose oldest
// waits longest; of its connections, an idle kept-alive one first, then the one waiting longest.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace gpool::allocator {

class DisplacementOrder {
 public:
  // (waiting for a request's bytes rather than idle, the time it began waiting): the smallest goes first.
  using Key = std::pair<bool, int64_t>;

  void add(int fd, const std::string& peer, Key key);
  void remove(int fd);  // nothing when it is not here
  std::optional<int> next() const;  // the connection to displace; none when none waits
  size_t size() const { return of_.size(); }

 private:
  using Waiting = std::set<std::pair<Key, int>>;
  // (connections waiting, minus when its first began, peer): the largest displaces first.
  using Rank = std::tuple<size_t, int64_t, std::string>;
  static Rank rank(const std::string& peer, const Waiting& w) { return {w.size(), -w.begin()->first.second, peer}; }

  std::unordered_map<int, std::pair<std::string, Key>> of_;  // by descriptor: whose, and its key
  std::map<std::string, Waiting> peers_;
  std::set<Rank> ranks_;
};

}  // namespace gpool::allocator
