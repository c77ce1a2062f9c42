// Time limits: a lease ends at its time limit after its grant (gpool run --time; a pool's max_time is the
// default and the most one may ask). Like preemption, it comes with notice: the policy's preemption_grace
// before the end, the lease's holder is told (Notice::kTimeLimit), so that its job may checkpoint.
#include <cmath>

#include "scheduler.h"

namespace gpool::allocator {

namespace {

std::string limitText(int64_t ms) { return durationText(std::chrono::milliseconds(ms)); }

}  // namespace

std::optional<std::string> Scheduler::exceedsMaxTime(const Pool& pool, const LeaseRequest& r) {
  if (pool.max_time.count() == 0 || r.time_limit_ms <= pool.max_time.count()) return std::nullopt;
  return "pool '" + pool.name + "' runs a lease for at most " + limitText(pool.max_time.count()) + ", less than the time limit " +
         limitText(r.time_limit_ms) + " asked for";
}

void Scheduler::limitTimes(int64_t now) {
  std::vector<std::string> due;
  for (const auto& [id, lp] : live_) {
    Lease& l = *lp;
    if (l.state != LeaseState::kGranted || l.req.time_limit_ms <= 0) continue;
    const int64_t end_at = l.limit_from_ms + l.req.time_limit_ms;
    if (now >= end_at) {
      due.push_back(id);
    } else if (l.notice == Notice::kNone && now >= end_at - policy_.preemption_grace.count()) {
      l.preempt_at_ms = end_at;
      l.notice = Notice::kTimeLimit;
      l.preempted_for = std::string(kTimeLimitPrefix) + limitText(l.req.time_limit_ms);
      touch(l);
    }
  }
  for (const auto& id : due) {
    ++time_limited_;
    finish(id, "reached its time limit (" + limitText(leases_.at(id).req.time_limit_ms) + ")", now);
  }
}

}  // namespace gpool::allocator
