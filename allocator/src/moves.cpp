// Moves (issue 15): a job placed on a slow GPU type because the fast ones were full stays there once they
// free, unless it is moved. Where a pool allows it (moves_per_hour) and none of its requests waits, a
// restartable lease (gpool run --requeue) of a known kind whose kind runs at least kMoveGain times faster
// on a type with room now gets notice, as for preemption; when the grace ends, its launcher runs the job
// again and placement puts it on the fastest type with room. At most moves_per_hour notices per pool per
// hour; the most to gain first.
#include <algorithm>

#include "gpu_fit.h"
#include "scheduler.h"

namespace gpool::allocator {

namespace {
constexpr double kMoveGain = 1.5;        // how much faster the job must run where it goes
constexpr int64_t kHourMs = 3600 * 1000;
}  // namespace

double Scheduler::speedOn(const Lease& l) const {
  double speed = 1;
  for (const auto& sh : l.shares)
    if (const Gpu* g = gpuOf(sh)) speed = std::min(speed, speedOf(l.req.kind, g->type));
  return speed;
}

void Scheduler::planMoves(int64_t now) {
  for (const Pool& pool : policy_.pools) {
    if (pool.moves_per_hour <= 0 || pool.round.count() > 0 || pool.heterogeneity != Heterogeneity::kAware || queue_.queuedIn(pool.name) > 0) continue;
    auto& recent = moves_[pool.name];
    while (!recent.empty() && now - recent.front() >= kHourMs) recent.pop_front();
    struct Move {
      Lease* lease;
      double gain;
      std::string type;
    };
    std::vector<Move> moves;
    for (const auto& [id, lp] : live_) {
      Lease& l = *lp;
      if (l.state != LeaseState::kGranted || l.preempt_at_ms || !l.req.restartable || !l.req.preemptible || l.req.n != 1 ||
          l.req.pool != pool.name || !throughputs_.knows(policy_, l.req.kind) && !launch_rates_.knows(policy_, l.req.kind))
        continue;
      double here = speedOn(l), best = here;
      std::string to;
      forEachOpenGpu(servers_, policy_, serving_, pool.name, [&](const Server&, const Gpu& g, bool heard) {
        double speed = speedOf(l.req.kind, g.type);
        if (heard && mayRunOn(l.req, g) && speed > best && sharesThatFit(g, l.shares[0].fraction, l.shares[0].memory, 1) > 0)
          best = speed, to = g.type;
      });
      if (!to.empty() && best >= kMoveGain * here) moves.push_back({&l, best / here, to});
    }
    std::sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) { return a.gain > b.gain; });
    for (const Move& m : moves) {
      if (static_cast<int>(recent.size()) >= pool.moves_per_hour) break;
      m.lease->preempt_at_ms = now + policy_.preemption_grace.count();
      m.lease->notice = Notice::kMove;
      m.lease->preempted_for = std::string(kMovePrefix) + m.type;
      touch(*m.lease);
      recent.push_back(now);
    }
  }
}

}  // namespace gpool::allocator
