// Preemption (issue 14): a queued request within its queue's guarantee that does not fit takes borrowed
// capacity back. Leases that hold their queue beyond its guarantee are chosen, the lowest priority and the
// most recently granted first, never a non-preemptible one, never so many that a queue falls below its own
// guarantee, and only until what they hold covers what the request asks beyond what is free now. Each gets
// notice (preempt_at_ms, which the launcher reads with its long polls) and keeps its share for the policy's
// grace period; then it ends, and the same tick grants the request. A notice is withdrawn when the request stops waiting first.
#include <algorithm>
#include <map>

#include "scheduler.h"

namespace gpool::allocator {

namespace {
constexpr double kEps = 1e-9;

double heldGpus(const Lease& l) {
  double gpus = 0;
  for (const auto& s : l.shares) gpus += s.fraction;
  return gpus;
}
}  // namespace

bool Scheduler::withinGuarantee(const Lease& l) const {
  int q = l.queue;
  return q >= 0 && fair_.beyondGuarantee(q, l.req.n * l.req.p) == 0;
}

int Scheduler::preemptFor(const Lease& l, int64_t now) {
  // What already fits now is not taken from anyone.
  double need = (l.req.n - freeSlots(l.req)) * l.req.p, noticed = 0;
  int leases = 0;
  struct Candidate {
    Lease* lease;
    int queue;
    double gpus;
  };
  std::vector<Candidate> candidates;
  for (const auto& [id, lp] : live_) {
    Lease& v = *lp;
    if (v.state != LeaseState::kGranted || v.req.pool != l.req.pool) continue;
    if (v.preempt_at_ms) {
      if (v.preempted_for == l.id) noticed += heldGpus(v), ++leases;
      continue;
    }
    int q = v.queue;
    if (v.req.preemptible && fair_.borrowed(q) > kEps) candidates.push_back({&v, q, heldGpus(v)});
  }
  // Leases already revoked for it whose servers still drain them: their room is on its way.
  for (const auto& [server, shares] : draining_)
    for (const auto& d : shares)
      if (auto it = leases_.find(d.lease); it != leases_.end() && it->second.preempted_for == l.id) noticed += d.fraction;
  if (noticed + kEps >= need) return leases;  // enough has notice already
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.lease->priority != b.lease->priority) return a.lease->priority < b.lease->priority;
    return a.lease->granted_ms > b.lease->granted_ms;
  });
  std::map<int, double> borrow_left;  // queue -> what it may still lose before it falls below its guarantee
  for (const Candidate& c : candidates) {
    double& left = borrow_left.try_emplace(c.queue, fair_.borrowed(c.queue)).first->second;
    if (c.gpus > left + kEps) continue;
    c.lease->preempt_at_ms = now + policy_.preemption_grace.count();
    c.lease->preempted_for = l.id;
    touch(*c.lease);
    left -= c.gpus;
    noticed += c.gpus;
    ++leases;
    if (noticed + kEps >= need) break;
  }
  return leases;
}

void Scheduler::revokePreempted(int64_t now) {
  std::vector<std::string> due;
  for (const auto& [id, lp] : live_) {
    Lease& v = *lp;
    if (v.state != LeaseState::kGranted || !v.preempt_at_ms) continue;
    const Lease* waiting = lease(v.preempted_for);
    if (!waiting || waiting->state != LeaseState::kQueued) {  // it no longer needs the room: notice withdrawn
      v.preempt_at_ms = 0;
      v.preempted_for.clear();
      touch(v);
    } else if (now >= v.preempt_at_ms) {
      due.push_back(id);
    }
  }
  for (const auto& id : due) {
    const Lease& waiting = *lease(leases_.at(id).preempted_for);
    const Queue* q = policy_.queueOf(waiting.req.user, waiting.req.chargedGroups());
    ++preempted_;
    finish(id, "preempted: queue '" + (q ? q->name : std::string("?")) + "' took back its guarantee (for request " + waiting.id + ")", now);
  }
}

}  // namespace gpool::allocator
