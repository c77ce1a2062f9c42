// Idle leases: in a pool with an idle_timeout, a granted lease on whose GPUs no kernel ran for that long
// ends, and its GPUs go to those who wait: a notebook left open over the weekend, a shell that leased a
// GPU and forgot it, a job stuck before its first kernel. Activity is what the lease's servers count of
// its kernels (gpool-server reports each lease's count with its heartbeats); no client process, no count.
#include "scheduler.h"

namespace gpool::allocator {

void Scheduler::noteLaunches(Lease& l, const std::string& server, double launches, int64_t now) {
  auto [it, first] = l.launched_on.try_emplace(server, launches);
  if ((first && launches > 0) || launches > it->second) l.active_ms = now;
  it->second = launches;  // (a count that fell started again: a worker of a new process)
}

void Scheduler::reclaimIdle(int64_t now) {
  std::vector<std::pair<std::string, std::string>> idle;  // (lease, why)
  for (const auto& [id, lp] : live_) {
    const Lease& l = *lp;
    if (l.state != LeaseState::kGranted) continue;
    const Pool* pool = policy_.pool(l.req.pool);
    if (!pool || pool->idle_timeout.count() == 0 || now - l.active_ms < pool->idle_timeout.count()) continue;
    idle.emplace_back(id, "reclaimed: no kernel ran on its GPUs for " + durationText(pool->idle_timeout) + " (pool '" +
                              pool->name + "' idle_timeout)");
  }
  for (const auto& [id, why] : idle) {
    ++reclaimed_idle_;
    finish(id, why, now);
  }
}

}  // namespace gpool::allocator
