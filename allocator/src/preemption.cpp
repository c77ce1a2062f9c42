// Preemption (issue 14): a queued request within its queue's guarantee that does not fit takes borrowed
// capacity back. Leases that hold their queue beyond its guarantee are chosen, the lowest priority and the
// most recently granted first, never a non-preemptible one, never so many that a queue falls below its own
// guarantee, and only until the room they hold, with what is free now, fits the request's shares: room is
// counted per GPU in whole shares, so leases whose room would stay in pieces too small are not taken. Each gets
// notice (preempt_at_ms, which the launcher reads with its long polls) and keeps its share for the policy's
// grace period; then it ends, and the same tick grants the request. A notice is withdrawn when the request stops waiting first.
#include <algorithm>
#include <map>

#include "gpu_fit.h"
#include "scheduler.h"

namespace gpool::allocator {

namespace {
constexpr double kEps = 1e-9;

// The room a request would have on its pool's GPUs if some leases gave theirs back: counted per GPU, in
// whole shares of the request, so room scattered in pieces too small for a share counts for nothing.
class Room {
 public:
  Room(std::map<std::pair<std::string, int>, Gpu> gpus, const LeaseRequest& r) : r_(r) {
    for (auto& [key, g] : gpus) {
      int n = fit(g, 0, 0);
      slots_ += n;
      gpus_.emplace(key, Entry{std::move(g), 0, 0, n});
    }
  }
  // sign +1: the share's room comes back to its GPU; -1: it is taken again.
  void giveBack(const std::string& server, int device, double fraction, uint64_t memory, int sign) {
    auto it = gpus_.find({server, device});
    if (it == gpus_.end()) return;  // a GPU that takes no new share now
    Entry& e = it->second;
    e.fraction += sign * fraction;
    e.memory = sign > 0 ? e.memory + memory : e.memory - std::min(e.memory, memory);
    int n = fit(e.gpu, e.fraction, e.memory);
    slots_ += n - e.slots;
    e.slots = n;
  }
  void giveBack(const Lease& l, int sign) {
    for (const auto& s : l.shares) giveBack(s.server, s.device, s.fraction, s.memory, sign);
  }
  bool enough() const { return slots_ >= r_.n; }
  int slots() const { return slots_; }

 private:
  struct Entry {
    Gpu gpu;          // as it is now
    double fraction;  // what would come back to it
    uint64_t memory;
    int slots;  // shares of the request it would fit
  };
  int fit(Gpu g, double fraction, uint64_t memory) const {
    g.used_fraction = std::max(0.0, g.used_fraction - fraction);
    g.used_memory -= std::min(g.used_memory, memory);
    return sharesThatFit(g, r_.p, shareMemory(r_, r_.p, g), r_.n);
  }
  const LeaseRequest& r_;
  std::map<std::pair<std::string, int>, Entry> gpus_;
  int slots_ = 0;
};

struct Candidate {
  Lease* lease;
  int queue;
  double gpus;
};

// Chooses leases to take room back from, GPU by GPU: each step takes, on the GPU where it costs least,
// the fewest leases (in preemption order, as far as their queues may lose them) that give the request one
// more share there; the cost is the place in preemption order of the last of them. Leases are taken only
// where they make whole shares: room scattered over GPUs helps nobody. `candidates` is in preemption order;
// `room` ends with the chosen leases' room given back.
std::vector<const Candidate*> chooseByGpu(Room& room, const std::vector<Candidate>& candidates, const FairShare& fair) {
  std::map<std::pair<std::string, int>, std::vector<size_t>> on_gpu;  // GPU → candidates with a share on it
  for (size_t i = 0; i < candidates.size(); ++i)
    for (const auto& s : candidates[i].lease->shares) {
      auto& list = on_gpu[{s.server, s.device}];
      if (list.empty() || list.back() != i) list.push_back(i);
    }
  std::vector<bool> taken(candidates.size());
  std::map<int, double> left;  // queue → what it may still lose before it falls below its guarantee
  auto leftOf = [&](std::map<int, double>& m, int q) -> double& { return m.try_emplace(q, fair.borrowed(q)).first->second; };
  std::vector<const Candidate*> chosen;
  while (!room.enough()) {
    std::vector<size_t> best;
    for (const auto& [gpu, list] : on_gpu) {
      std::vector<size_t> step;
      std::map<int, double> trial = left;
      const int before = room.slots();
      for (size_t i : list) {
        const Candidate& c = candidates[i];
        double& l = leftOf(trial, c.queue);
        if (taken[i] || c.gpus > l + kEps) continue;
        l -= c.gpus;
        room.giveBack(*c.lease, +1);
        step.push_back(i);
        if (room.slots() > before) break;
      }
      const bool gains = room.slots() > before;
      for (size_t i : step) room.giveBack(*candidates[i].lease, -1);
      if (gains && (best.empty() || step.back() < best.back() || (step.back() == best.back() && step.size() < best.size())))
        best = step;
    }
    if (best.empty()) break;  // no lease left that makes a share
    for (size_t i : best) {
      taken[i] = true;
      leftOf(left, candidates[i].queue) -= candidates[i].gpus;
      room.giveBack(*candidates[i].lease, +1);
      chosen.push_back(&candidates[i]);
    }
  }
  return chosen;
}
}  // namespace

bool Scheduler::withinGuarantee(const Lease& l) const {
  int q = l.queue;
  return q >= 0 && fair_.beyondGuarantee(q, l.req.n * l.req.p) == 0;
}

int Scheduler::preemptFor(const Lease& l, int64_t now) {
  Room room(openGpus(l.req), l.req);  // what is free now is not taken from anyone
  int leases = 0;
  std::vector<Candidate> candidates;
  for (const auto& [id, lp] : live_) {
    Lease& v = *lp;
    if (v.state != LeaseState::kGranted || v.req.pool != l.req.pool) continue;
    if (v.preempt_at_ms) {
      if (v.preempted_for == l.id) room.giveBack(v, +1), ++leases;  // notice given already
      // One its time limit ends before a notice given now would: its room comes as soon, nobody preempted.
      else if (v.notice == Notice::kTimeLimit && v.preempt_at_ms <= now + policy_.preemption_grace.count()) room.giveBack(v, +1);
      continue;
    }
    int q = v.queue;
    if (v.req.preemptible && fair_.borrowed(q) > kEps) candidates.push_back({&v, q, v.heldGpus()});
  }
  // Leases already revoked for it whose servers still drain them: their room is on its way.
  for (const auto& [server, shares] : draining_)
    for (const auto& d : shares)
      if (auto it = leases_.find(d.lease); it != leases_.end() && it->second.preempted_for == l.id)
        room.giveBack(server, d.device, d.fraction, d.memory, +1);
  if (room.enough()) return leases;
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.lease->priority != b.lease->priority) return a.lease->priority < b.lease->priority;
    if (a.lease->granted_ms != b.lease->granted_ms) return a.lease->granted_ms > b.lease->granted_ms;
    return a.lease->seq > b.lease->seq;
  });
  std::vector<const Candidate*> chosen = chooseByGpu(room, candidates, fair_);
  if (!room.enough()) return leases;  // no choice of borrowed leases makes room for it: nobody is preempted for nothing
  // Never more than needed: a chosen lease whose room turns out not to be needed (later choices covered
  // it) is spared, the last chosen first.
  for (size_t i = chosen.size(); i-- > 0;) {
    room.giveBack(*chosen[i]->lease, -1);
    if (room.enough()) chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(i));
    else room.giveBack(*chosen[i]->lease, +1);
  }
  for (const Candidate* c : chosen) {
    c->lease->preempt_at_ms = now + policy_.preemption_grace.count();
    c->lease->notice = Notice::kPreemption;
    c->lease->preempted_for = l.id;
    touch(*c->lease);
    ++leases;
  }
  return leases;
}

void Scheduler::revokePreempted(int64_t now) {
  std::vector<std::string> due;
  for (const auto& [id, lp] : live_) {
    Lease& v = *lp;
    if (v.state != LeaseState::kGranted || !v.preempt_at_ms || v.notice == Notice::kTimeLimit) continue;  // (that end: limitTimes)
    const Lease* waiting = v.notice == Notice::kPreemption ? lease(v.preempted_for) : nullptr;
    if (v.notice != Notice::kPreemption) {  // a move or a round's: kept until due
      if (now >= v.preempt_at_ms) due.push_back(id);
    } else if (!waiting || waiting->state != LeaseState::kQueued) {  // it no longer needs the room: notice withdrawn
      v.preempt_at_ms = 0;
      v.notice = Notice::kNone;
      v.preempted_for.clear();
      touch(v);
    } else if (now >= v.preempt_at_ms) {
      due.push_back(id);
    }
  }
  for (const auto& id : due) {
    const Lease& v = leases_.at(id);
    const std::string& why = v.preempted_for;
    if (v.notice == Notice::kRound) {
      finish(id, "preempted by its pool's round: " + why.substr(std::min(why.size(), kRoundPrefix.size())), now);
      continue;
    }
    if (v.notice == Notice::kMove) {
      ++moved_;
      finish(id, "moved: its job runs faster elsewhere (" + why + ", where it was free)", now);
      continue;
    }
    const Lease& waiting = *lease(why);
    const Queue* q = policy_.queueOf(waiting.req.user, waiting.req.chargedGroups());
    ++preempted_;
    finish(id, "preempted: queue '" + (q ? q->name : std::string("?")) + "' took back its guarantee (for request " + waiting.id + ")", now);
  }
}

}  // namespace gpool::allocator
