// gpool-replay's engine (replay.h).
#include "replay.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpool::replay {

using allocator::Decision;
using allocator::Lease;
using allocator::LeaseState;

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

int64_t toMs(double s) { return static_cast<int64_t>(std::llround(s * 1000)); }

// The replay's clock never lets a heartbeat lapse: leases and servers live until the trace ends them. The
// scheduler knows the trace's job kinds unless the policy has a table of its own.
allocator::Policy timeless(allocator::Policy p, const Trace& t, bool learn) {
  if (p.job_kinds.empty() && !learn) p.job_kinds = t.kinds;  // what the trace knows of its kinds, as an admin's table
  const auto forever = std::chrono::hours(24 * 365 * 100);
  p.lease_ttl = p.server_timeout = p.token_ttl = std::chrono::duration_cast<std::chrono::milliseconds>(forever);
  return p;
}

}  // namespace

Replay::Replay(const Trace& trace, allocator::Policy policy, ReplayOptions options)
    : trace_(trace),
      options_(options),
      sched_(timeless(std::move(policy), trace, options.learn), [](const Lease&, const allocator::Share&, int, int64_t) { return std::string(); },
             [this] { return now_ms_ / 1000; }) {
  for (const auto& [type, count] : trace_.cluster)
    for (int first = 0, s = 0; first < count; first += trace_.gpus_per_server, ++s) {
      allocator::Server srv;
      srv.name = type + "-" + std::to_string(s);
      srv.address = "replay:0";
      for (int i = 0; i < std::min(trace_.gpus_per_server, count - first); ++i)
        srv.gpus.push_back(allocator::Gpu{i, srv.name + "/" + std::to_string(i), type, 80ull << 30, 100});
      sched_.registerServer(std::move(srv), 0);
    }
  results_.resize(trace_.jobs.size());
  remaining_.resize(trace_.jobs.size());
  attempts_.resize(trace_.jobs.size());
  for (size_t i = 0; i < trace_.jobs.size(); ++i) {
    const TraceJob& job = trace_.jobs[i];
    results_[i].id = job.id;
    results_[i].arrival_s = job.arrival_s;
    results_[i].isolated_s = job.steps / trace_.bestRate(job.kind);
    remaining_[i] = job.steps;
  }
}

void Replay::arrive(size_t i) {
  const TraceJob& job = trace_.jobs[i];
  allocator::LeaseRequest r;
  r.user = job.user;
  r.n = job.n;
  r.p = options_.whole_gpus ? 1.0 : job.p;
  r.wait_ms = -1;
  r.gpu_types = job.types;
  r.preemptible = job.preemptible;
  r.kind = job.kind;
  r.restartable = job.preemptible;  // a preempted job asks again (requeue)
  r.job = job.id;
  r.estimate_s = results_[i].isolated_s;  // what the trace knows; only shortest-first pools look
  std::string id = job.id + "#" + std::to_string(++attempts_[i]);
  job_of_[id] = i;
  Decision d = sched_.request(r, now_ms_, id);
  if (d.kind == Decision::kRefused) throw TraceError("job " + job.id + " was refused: " + d.reason);
}

double Replay::rateOf(const Lease& l, const TraceJob& job) const {
  double rate = std::numeric_limits<double>::infinity();
  for (const auto& sh : l.shares) {
    const allocator::Gpu* g = sched_.gpuOf(sh);
    rate = std::min(rate, g ? trace_.rate(job.kind, g->type) : 0.0);
  }
  return l.shares.empty() ? 0 : rate;  // a gang moves at its slowest share's pace
}

void Replay::start(const Lease& l) {
  size_t i = job_of_.at(l.id);
  const int64_t restart = attempts_[i] > 1 ? toMs(options_.restart_s) : 0;  // it ran before: it restarts
  Running r{i, rateOf(l, trace_.jobs[i]), now_ms_ + restart, now_ms_, l.heldGpus(), trace_.jobs[i].n * trace_.jobs[i].p};
  if (r.rate <= 0) throw InvariantError("job " + trace_.jobs[i].id + " was placed on a GPU type it cannot run on");
  if (results_[i].start_s < 0) results_[i].start_s = static_cast<double>(now_ms_) / 1000;
  r.done_ms = r.since_ms + static_cast<int64_t>(std::ceil(remaining_[i] / r.rate * 1000));
  done_at_.insert({r.done_ms, l.id});
  running_[l.id] = r;
}

void Replay::stop(const std::string& lease, bool done) {
  auto it = running_.find(lease);
  const Running r = it->second;
  running_.erase(it);
  done_at_.erase({r.done_ms, lease});
  JobResult& res = results_[r.job];
  double held = static_cast<double>(now_ms_ - r.held_ms) / 1000, worked = std::max<double>(0, now_ms_ - r.since_ms) / 1000;
  res.gpu_seconds += r.fraction * held;
  res.work_seconds += r.uses * worked;
  remaining_[r.job] = done ? 0 : std::max(0.0, remaining_[r.job] - r.rate * worked);
  if (!done) {
    ++res.preemptions;
    if (!trace_.jobs[r.job].preemptible)
      throw InvariantError("non-preemptible job " + trace_.jobs[r.job].id + " lost its lease: " + sched_.lease(lease)->end_reason);
  }
  if (remaining_[r.job] <= 0) res.finish_s = static_cast<double>(now_ms_) / 1000;
  else arrive(r.job);  // preempted: it asks again for the rest of its work
}

void Replay::absorb() {
  for (auto dirty = sched_.takeDirtyLeases(); !dirty.empty(); dirty = sched_.takeDirtyLeases())
    for (const auto& id : dirty) {
      const Lease* l = sched_.lease(id);
      if (!l || !job_of_.count(id)) continue;
      if (l->state == LeaseState::kGranted && !running_.count(id)) start(*l);
      else if (l->state == LeaseState::kEnded && running_.count(id)) stop(id, false);
      if (l->state == LeaseState::kGranted && l->preempt_at_ms > now_ms_) wakes_.insert(l->preempt_at_ms);
    }
}

int64_t Replay::nextEvent(size_t next_arrival) {
  int64_t t = next_arrival < trace_.jobs.size() ? toMs(trace_.jobs[next_arrival].arrival_s) : kNever;
  if (!done_at_.empty()) t = std::min(t, done_at_.begin()->first);
  if (!wakes_.empty()) t = std::min(t, *wakes_.begin());
  if (t != kNever || !running_.empty() || sched_.queued() > 0) t = std::min(t, sched_.nextRound());  // (rounds end with the work)
  return t;
}

std::vector<JobResult> Replay::run() {
  size_t next = 0;
  for (int64_t t = nextEvent(next); t != kNever; t = nextEvent(next)) {
    now_ms_ = std::max(now_ms_, t);
    ++steps_;
    while (!done_at_.empty() && done_at_.begin()->first <= now_ms_) {
      std::string lease = done_at_.begin()->second;
      stop(lease, true);
      sched_.end(lease, "released", now_ms_);
    }
    while (next < trace_.jobs.size() && toMs(trace_.jobs[next].arrival_s) <= now_ms_) arrive(next++);
    wakes_.erase(wakes_.begin(), wakes_.upper_bound(now_ms_));
    if (options_.learn) reportProgress();
    sched_.tick(now_ms_);
    absorb();
    while (sched_.moreToGrant()) {
      sched_.grantMore(now_ms_);
      absorb();
    }
    check();
  }
  for (const auto& r : results_)
    if (r.finish_s < 0)
      throw InvariantError("job " + r.id + " never finished (" + std::to_string(sched_.queued()) + " requests still queued)");
  return results_;
}

void Replay::reportProgress() {
  for (const auto& [lease, r] : running_)
    sched_.reportProgress(lease, r.rate * static_cast<double>(std::max<int64_t>(0, now_ms_ - r.since_ms)) / 1000, now_ms_);
}

void Replay::check() const {
  std::map<std::pair<std::string, int>, double> held;  // what the granted leases hold on each GPU
  std::map<std::string, std::set<std::string>> on;      // the granted leases with a share on each server
  size_t granted = 0;
  for (const auto& [id, l] : sched_.live()) {
    if (l->state != LeaseState::kGranted) continue;
    ++granted;
    for (const auto& sh : l->shares) {
      held[{sh.server, sh.device}] += sh.fraction;
      on[sh.server].insert(id);
      const allocator::Gpu* g = sched_.gpuOf(sh);
      if (!g || !l->req.accepts(*g)) throw InvariantError("lease " + id + " holds a GPU of a type it did not ask for");
    }
  }
  for (const auto& [name, s] : sched_.servers()) {
    std::vector<std::string> live = sched_.liveLeasesOn(name);  // what a server is told it may serve
    if (std::set<std::string>(live.begin(), live.end()) != on[name])
      throw InvariantError("server " + name + " would be told to serve other leases than those granted on it");
    for (const auto& g : s.gpus) {
      double h = held.count({name, g.index}) ? held.at({name, g.index}) : 0.0;
      if (g.used_fraction > 1 + 1e-9 || h > 1 + 1e-9 || g.used_memory > g.memory)
        throw InvariantError("GPU " + name + ":" + std::to_string(g.index) + " is over-committed");
      if (std::abs(g.used_fraction - h) > 1e-6)
        throw InvariantError("GPU " + name + ":" + std::to_string(g.index) + " counts " + std::to_string(g.used_fraction) +
                             " in use, but its leases hold " + std::to_string(h));
    }
  }
  if (granted != running_.size()) throw InvariantError("the allocator's granted leases and the running jobs differ");
}

Summary summarize(const std::vector<JobResult>& results, int gpus) {
  Summary s;
  s.jobs = results.size();
  if (results.empty()) return s;
  std::vector<double> jct;
  double first = results.front().arrival_s, last = 0, busy = 0, held = 0, queueing = 0, x = 0, x2 = 0;
  for (const auto& r : results) {
    double c = r.finish_s - r.arrival_s;
    jct.push_back(c);
    first = std::min(first, r.arrival_s);
    last = std::max(last, r.finish_s);
    busy += r.work_seconds;
    held += r.gpu_seconds;
    queueing += r.start_s - r.arrival_s;
    double speed = c > 0 ? r.isolated_s / c : 1;
    x += speed;
    x2 += speed * speed;
    s.preemptions += r.preemptions;
  }
  std::sort(jct.begin(), jct.end());
  double n = static_cast<double>(jct.size());
  for (double c : jct) s.avg_jct_h += c / n / 3600;
  s.p99_jct_h = jct[static_cast<size_t>(std::ceil(0.99 * n)) - 1] / 3600;
  s.makespan_h = (last - first) / 3600;
  s.utilization = last > first ? busy / (gpus * (last - first)) : 0;
  s.allocated = last > first ? held / (gpus * (last - first)) : 0;
  s.avg_queueing_h = queueing / n / 3600;
  s.jain = x2 > 0 ? x * x / (n * x2) : 1;
  return s;
}

}  // namespace gpool::replay
