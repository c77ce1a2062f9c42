// Which leases this gpool-server may serve: exactly the ones the allocator last called live for it (its
// answer to every registration and heartbeat), never what the server remembers, so a lease that ended
// stays ended here across restarts and lost messages. A client whose lease is not (yet) in that set
// waits for an answer the allocator gave after the client arrived: a lease granted a moment ago is in it,
// an ended one is not. Not thread-safe: the server calls it from its one I/O thread.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace gpool::server {

class LeaseGate {
 public:
  // Called once per waiting client: whether its lease is live, and why not.
  using Verdict = std::function<void(bool live, const std::string& why)>;

  // A client presents `lease`. Answers at once when the lease is live; otherwise waits for an answer to
  // request `asked` or a later one (what AllocatorLink::refresh returned), or for expire(ticket).
  uint64_t admit(const std::string& lease, uint64_t asked, Verdict verdict);
  // The allocator's answer to request number `asked`: the live leases. Settles the clients that waited for
  // it, and returns the leases that were live here and are no longer (their workers must stop).
  std::vector<std::string> update(const std::vector<std::string>& live, uint64_t asked);
  // Gives up on one waiting client (the allocator did not answer in time); nothing if it was settled.
  void expire(uint64_t ticket);
  bool live(const std::string& lease) const { return live_.count(lease) != 0; }

 private:
  struct Waiting {
    std::string lease;
    uint64_t asked;
    uint64_t ticket;
    Verdict verdict;
  };
  uint64_t next_ticket_ = 1;
  std::vector<Waiting> take(const std::function<bool(const Waiting&)>& pick);  // removes and returns those picked
  std::set<std::string> live_;
  std::vector<Waiting> waiting_;
};

}  // namespace gpool::server
