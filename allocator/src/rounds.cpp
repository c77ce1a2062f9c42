// Rounds (issue 15): in a pool with `round`, which jobs run, and on which GPU type, is decided again every
// round, as Gavel (OSDI 2020) does, so that a policy can divide the GPUs' time among more jobs than fit
// at once and move jobs between types.
//
// A round's candidates are the pool's queued requests and its running leases that may be stopped
// (restartable: gpool run --requeue; preemptible; not within a queue's guarantee). What other leases hold
// is not the round's to give. The pool's order chooses among them:
// - max-min: Gavel's heterogeneity-aware max-min fairness. time_shares.h divides each type's time among
//   the jobs (X[j][t]); each round, the jobs that have had the least of their share of a type so far
//   (X[j][t] over the fraction of their time in the pool they ran there) run there first.
// - fifo, shortest-first, least-attained: the first in the order run; in aware pools each on the type that
//   makes the chosen jobs' summed (normalized) throughput largest, else where it runs or where most room is.
// Either way a running job's claim to its place counts `round_stay` times (its max-min priority times it,
// its attained service divided by it): without that, jobs of nearly equal claims swap every round, and
// each swap costs both a restart.
// A running job that loses its place gets notice, as for preemption (kRoundPrefix), and its launcher runs it
// again later; the chosen queued requests come first in the wait queue, each kept to its chosen type
// (Lease::round_type). Between rounds, room that frees goes to queued requests in that order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>

#include "gpu_fit.h"
#include "scheduler.h"
#include "time_shares.h"

namespace gpool::allocator {

namespace {
constexpr double kEps = 1e-9;
constexpr double kStayBonus = 1.05;  // a running job changes type only to run at least this much faster
constexpr double kFirstTurn = 1e9;   // priority weight of a share of a type a job has not yet run on
}  // namespace

struct RoundJob {
  Lease* lease;
  std::string job;      // whose service it is (attained_)
  double gpus = 0;      // what it holds while it runs
  int current = -1;     // the type it runs on now (index), -1: queued
  int chosen = -1;      // the type it runs on this round, -1: it waits
  int pick = -1;        // its place among the chosen, in the order they were chosen
  std::vector<double> speed;  // by type, as the pool sees it (agnostic: 1 wherever it can run)
};

int64_t Scheduler::nextRound() const {
  int64_t next = std::numeric_limits<int64_t>::max();
  for (const Pool& pool : policy_.pools) {
    if (pool.round.count() <= 0) continue;
    auto it = next_round_.find(pool.name);
    next = std::min(next, it == next_round_.end() ? 0 : it->second);
  }
  return next;
}

void Scheduler::planRounds(int64_t now) {
  for (const Pool& pool : policy_.pools) {
    if (pool.round.count() <= 0) continue;
    auto [it, first] = next_round_.try_emplace(pool.name, now);
    if (now < it->second) continue;
    it->second = now + pool.round.count();
    planRound(pool, now);
  }
}

std::string Scheduler::jobOf(const Lease& l) { return l.req.job.empty() ? "#" + l.id : l.req.user + "/" + l.req.job; }

void Scheduler::chargeAttained(Lease& l, int64_t now) {
  const Pool* pool = policy_.pool(l.req.pool);
  if (l.state != LeaseState::kGranted || !pool || (l.req.job.empty() && pool->round.count() <= 0)) return;
  const int64_t from = std::max(l.granted_ms, l.attained_to_ms);
  if (now <= from) return;
  const double seconds = static_cast<double>(now - from) / 1000;
  const double speed = pool->heterogeneity == Heterogeneity::kAware ? speedOn(l) : 1.0;
  Attained& a = attainedOf(jobOf(l), now);
  a.seconds += l.heldGpus() * speed * seconds;
  if (const Gpu* g = l.shares.empty() ? nullptr : gpuOf(l.shares[0])) a.on_type[g->type] += seconds;
  l.attained_to_ms = now;
}

Scheduler::Attained& Scheduler::attainedOf(const std::string& job, int64_t now) {
  auto [it, fresh] = attained_.try_emplace(job);
  if (fresh) attained_at_.emplace_back(now, job);  // prune() finds it from here
  it->second.last_ms = now;
  return it->second;
}

// The candidates of a round, and each type's room for them (in GPUs): what is free now, and what the
// candidates that run hold.
std::vector<RoundJob> Scheduler::roundCandidates(const Pool& pool, int64_t now, std::map<std::string, double>& room) {
  forEachOpenGpu(servers_, policy_, serving_, pool.name, [&](const Server&, const Gpu& g, bool heard) {
    room[g.type] += heard ? std::max(0.0, 1.0 - g.used_fraction) : 0.0;
  });
  std::vector<RoundJob> jobs;
  for (const auto& [id, lp] : live_) {
    Lease& l = *lp;
    if (l.req.pool != pool.name) continue;
    if (l.state == LeaseState::kGranted) {
      chargeAttained(l, now);
      const bool guaranteed = fair_.active() && fair_.borrowed(l.queue) <= kEps;
      if (l.preempt_at_ms || !l.req.restartable || !l.req.preemptible || guaranteed || l.shares.empty()) continue;
      const Gpu* g = gpuOf(l.shares[0]);
      if (!g) continue;
      room[g->type] += l.heldGpus();
      jobs.push_back({&l, jobOf(l), l.heldGpus()});
    } else if (l.state == LeaseState::kQueued && !quotaBlocks(l)) {
      jobs.push_back({&l, jobOf(l), l.req.n * l.req.p});
    } else {
      continue;
    }
    if (Attained& a = attainedOf(jobs.back().job, now); a.first_ms == 0) a.first_ms = now;
  }
  return jobs;
}

void Scheduler::planRound(const Pool& pool, int64_t now) {
  std::map<std::string, double> room;
  std::vector<RoundJob> jobs = roundCandidates(pool, now, room);
  std::vector<std::string> types;
  std::vector<double> capacity;
  for (const auto& [type, gpus] : room) types.push_back(type), capacity.push_back(gpus);
  const bool aware = pool.heterogeneity == Heterogeneity::kAware;
  for (RoundJob& j : jobs) {
    Lease& l = *j.lease;
    j.current = -1;
    if (l.state == LeaseState::kGranted)
      if (const Gpu* g = gpuOf(l.shares[0]))
        j.current = static_cast<int>(std::find(types.begin(), types.end(), g->type) - types.begin());
    for (const auto& type : types) {
      Gpu probe;
      probe.type = type;
      double speed = l.req.accepts(probe) ? speedOf(l.req.kind, type) : 0.0;
      j.speed.push_back(aware || speed <= 0 ? speed : 1.0);
    }
  }
  if (pool.order == Order::kMaxMin) chooseByMaxMin(pool, jobs, types, capacity, now);
  else chooseByOrder(pool, jobs, capacity);
  applyRound(pool, jobs, types, now);
}

namespace {

// Who runs, of `jobs` in the order given: each that has room left on a type it can run on (counted on
// the roomiest). In the order chosen.
std::vector<RoundJob*> admit(const std::vector<RoundJob*>& jobs, std::vector<double> left) {
  std::vector<RoundJob*> chosen;
  for (RoundJob* j : jobs) {
    int best = -1;
    for (size_t t = 0; t < left.size(); ++t)
      if (j->speed[t] > 0 && left[t] + kEps >= j->gpus && (best < 0 || left[t] > left[static_cast<size_t>(best)])) best = static_cast<int>(t);
    if (best < 0) continue;
    left[static_cast<size_t>(best)] -= j->gpus;
    j->pick = static_cast<int>(chosen.size());
    chosen.push_back(j);
  }
  return chosen;
}

// Where the chosen run. Aware: the types that make their summed relative speed largest (a running job
// stays unless it gains kStayBonus). Agnostic: where each runs, else the type with the most room left.
void place(bool aware, const std::vector<RoundJob*>& chosen, const std::vector<double>& capacity) {
  if (aware) {
    std::vector<ShareJob> share;
    for (const RoundJob* j : chosen) {
      share.push_back({j->gpus, j->speed});
      if (j->current >= 0) share.back().speed[static_cast<size_t>(j->current)] *= kStayBonus;
    }
    std::vector<int> to = fastestTypes(share, capacity);
    for (size_t i = 0; i < chosen.size(); ++i) chosen[i]->chosen = to[i];
    return;
  }
  std::vector<double> left = capacity;
  for (RoundJob* j : chosen)
    if (j->current >= 0 && left[static_cast<size_t>(j->current)] + kEps >= j->gpus)
      j->chosen = j->current, left[static_cast<size_t>(j->current)] -= j->gpus;
  for (RoundJob* j : chosen) {
    if (j->chosen >= 0) continue;
    for (size_t t = 0; t < left.size(); ++t)
      if (j->speed[t] > 0 && left[t] + kEps >= j->gpus && (j->chosen < 0 || left[t] > left[static_cast<size_t>(j->chosen)]))
        j->chosen = static_cast<int>(t);
    if (j->chosen >= 0) left[static_cast<size_t>(j->chosen)] -= j->gpus;
  }
}

}  // namespace

// The first in the pool's order run (higher priority classes first; among equals, those running).
void Scheduler::chooseByOrder(const Pool& pool, std::vector<RoundJob>& jobs, const std::vector<double>& capacity) {
  std::vector<RoundJob*> order;
  for (RoundJob& j : jobs) order.push_back(&j);
  auto value = [&](const RoundJob* j) {  // least-attained: a running job's service counts round_stay times less
    const double v = orderValue(*j->lease);
    return pool.order == Order::kLeastAttained && j->current >= 0 ? v / pool.round_stay : v;
  };
  std::stable_sort(order.begin(), order.end(), [&](const RoundJob* a, const RoundJob* b) {
    const Lease &x = *a->lease, &y = *b->lease;
    if (x.priority != y.priority) return x.priority > y.priority;
    const double kx = value(a), ky = value(b);
    if (kx != ky) return kx < ky;
    if ((a->current >= 0) != (b->current >= 0)) return a->current >= 0;
    return x.seq < y.seq;
  });
  place(pool.heterogeneity == Heterogeneity::kAware, admit(order, capacity), capacity);
}

// Max-min fairness: X from maxMinShares. Aware, Gavel's round: each (job, type) has priority X[j][t] over
// the fraction of the job's time in the pool it has run on t; the highest run first where they fit.
// Agnostic (every speed 1): each job's priority is its share of time over the fraction it has had, on any
// type; the first run, placed type-blind. Room left after that goes to the rest (no GPU idles while a
// job could use it).
void Scheduler::chooseByMaxMin(const Pool& pool, std::vector<RoundJob>& jobs, const std::vector<std::string>& types,
                               const std::vector<double>& capacity, int64_t now) {
  std::vector<ShareJob> share;
  for (const RoundJob& j : jobs) share.push_back({j.gpus, j.speed});
  const std::vector<std::vector<double>> x = maxMinShares(share, capacity);
  const bool aware = pool.heterogeneity == Heterogeneity::kAware;
  struct Pair {
    RoundJob* job;
    int type;  // -1: any (agnostic)
    double priority;
  };
  std::vector<Pair> pairs;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Attained& a = attained_[jobs[j].job];
    const double in_pool = std::max(1.0, static_cast<double>(now - a.first_ms) / 1000);
    auto priority = [&](double want, double ran) { return ran > 0 ? want / (ran / in_pool) : kFirstTurn * want; };
    if (!aware) {
      double want = std::accumulate(x[j].begin(), x[j].end(), 0.0), ran = 0;
      for (const auto& [type, seconds] : a.on_type) ran += seconds;
      pairs.push_back({&jobs[j], -1, priority(want, ran)});
      continue;
    }
    for (size_t t = 0; t < types.size(); ++t) {
      auto ran = a.on_type.find(types[t]);
      if (x[j][t] > 1e-6) pairs.push_back({&jobs[j], static_cast<int>(t), priority(x[j][t], ran == a.on_type.end() ? 0 : ran->second)});
    }
  }
  for (Pair& p : pairs)  // a running job's claim to where it runs counts round_stay times
    if (p.job->current >= 0 && (p.type == p.job->current || p.type < 0)) p.priority *= pool.round_stay;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Pair& a, const Pair& b) {
    const Lease &x1 = *a.job->lease, &x2 = *b.job->lease;
    if (x1.priority != x2.priority) return x1.priority > x2.priority;
    if (a.priority != b.priority) return a.priority > b.priority;
    return (a.job->current == a.type) > (b.job->current == b.type);
  });
  if (!aware) {
    std::vector<RoundJob*> order;
    for (const Pair& p : pairs) order.push_back(p.job);
    for (RoundJob& j : jobs)
      if (std::all_of(pairs.begin(), pairs.end(), [&](const Pair& p) { return p.job != &j; })) order.push_back(&j);
    place(false, admit(order, capacity), capacity);
    return;
  }
  std::vector<double> left = capacity;
  int picks = 0;
  auto take = [&](RoundJob& j, size_t t) {
    if (j.chosen >= 0 || j.speed[t] <= 0 || left[t] + kEps < j.gpus) return;
    j.chosen = static_cast<int>(t);
    j.pick = picks++;
    left[t] -= j.gpus;
  };
  for (const Pair& p : pairs) take(*p.job, static_cast<size_t>(p.type));
  for (RoundJob& j : jobs) {
    std::vector<size_t> order(types.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return j.speed[a] > j.speed[b]; });
    for (size_t t : order) take(j, t);
  }
}

// Notice to running jobs that lose their place or change type; the chosen queued requests first in the
// order (in the order chosen), each kept to its type; the rest behind them in the pool's order.
void Scheduler::applyRound(const Pool& pool, std::vector<RoundJob>& jobs, const std::vector<std::string>& types, int64_t now) {
  std::erase_if(round_choice_, [&](const auto& c) { return c.second.pool == pool.name; });
  for (const RoundJob& j : jobs)
    if (j.chosen >= 0) round_choice_[j.job] = {pool.name, types[static_cast<size_t>(j.chosen)], j.pick};
  const std::string policy = std::string(" this round (") + orderName(pool.order) + ")";
  for (RoundJob& j : jobs) {
    Lease& l = *j.lease;
    if (l.state == LeaseState::kQueued) {
      if (auto [type, key] = queuePlace(l); type != l.round_type || key != l.order_key) {  // (most stay where they are)
        queue_.remove(l);
        l.round_type = std::move(type), l.order_key = key;
        queue_.add(l);
      }
    } else if (j.chosen < 0 || j.chosen != j.current) {
      ++rotated_;
      l.preempt_at_ms = now + policy_.preemption_grace.count();
      l.notice = Notice::kRound;
      l.preempted_for = std::string(kRoundPrefix) +
                        (j.chosen < 0 ? "other jobs' turn in pool '" + pool.name + "'" : "it moves to " + types[static_cast<size_t>(j.chosen)]) + policy;
      touch(l);
    }
  }
}

std::pair<std::string, double> Scheduler::queuePlace(const Lease& l) const {
  if (!round_choice_.empty())
    if (auto c = round_choice_.find(jobOf(l)); c != round_choice_.end() && c->second.pool == l.req.pool) return {c->second.type, c->second.pick};
  return {"", orderKey(l)};
}

void Scheduler::enqueue(Lease& l) {
  std::tie(l.round_type, l.order_key) = queuePlace(l);
  queue_.add(l);
}

}  // namespace gpool::allocator
