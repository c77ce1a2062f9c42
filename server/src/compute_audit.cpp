#include "compute_audit.h"

#include <algorithm>
#include <limits>

#include "lease_processes.h"

namespace gpool::server {

namespace {

// a + b for counts that are never below 0, at most INT64_MAX: what a worker taken over wrote in a page it
// can reach (on sim) must not wrap a lease's count round.
int64_t saturated(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

// `processes`, and the workers of lease `id` not among them (all are ended).
void addWorkers(std::vector<pid_t>& processes, const std::string& id, const std::vector<ComputeAudit::Lease>& leases) {
  for (const ComputeAudit::Lease& l : leases)
    if (l.id == id)
      for (pid_t w : l.workers)
        if (std::find(processes.begin(), processes.end(), w) == processes.end()) processes.push_back(w);
}

}  // namespace

// Each lease's share of each device it has shares on: its shares there, summed (two shares of one lease may
// be on one GPU), at most a whole GPU. (Two workers of one share on one device count it once.)
std::map<ComputeAudit::Key, double> ComputeAudit::fractions(const std::vector<Lease>& leases) {
  std::map<Key, double> fraction;
  for (const Lease& lease : leases) {
    std::map<std::pair<int, int>, double> shares;  // (device, share) -> fraction
    for (const Share& share : lease.shares) shares[{share.device, share.number}] = share.fraction;
    for (const auto& [where, f] : shares) {
      double& sum = fraction[{lease.id, where.first}];
      sum = std::min(1.0, sum + f);
    }
  }
  return fraction;
}

std::vector<ComputeAudit::Finding> ComputeAudit::audit(const ProcessBusy& busy, int64_t elapsed_ns,
                                                       const std::vector<Lease>& leases) {
  ProcessOwners owners(leases);
  std::map<Key, double> fraction = fractions(leases);
  std::map<Key, std::pair<int64_t, std::vector<pid_t>>> used;  // device time its processes took, and which
  for (const auto& [where, ns] : busy)
    if (auto i = owners.of(where.second)) {
      auto& [sum, processes] = used[{leases[*i].id, where.first}];
      sum = saturated(sum, ns);
      processes.push_back(where.second);
    }
  std::set<Key> keys;  // where a lease has a share or took time, and where one still here was ahead
  for (const auto& [key, f] : fraction) keys.insert(key);
  for (const auto& [key, u] : used) keys.insert(key);
  for (const auto& [key, s] : state_)
    if (std::any_of(leases.begin(), leases.end(), [&](const Lease& l) { return l.id == key.first; })) keys.insert(key);

  std::map<Key, State> next;
  std::vector<Finding> findings;
  for (const Key& key : keys) {
    State s = state_.count(key) ? state_.at(key) : State{};
    if (auto f = fraction.find(key); f != fraction.end()) s.fraction = f->second;  // (else: as last placed)
    if (s.fraction >= 1) continue;  // a whole GPU: not paced, not audited
    auto u = used.find(key);
    int64_t took = u == used.end() ? 0 : u->second.first;
    auto paid = static_cast<int64_t>(s.fraction * static_cast<double>(elapsed_ns));
    s.ahead_ns = std::max<int64_t>(0, saturated(s.ahead_ns, took) - paid);
    if (s.ahead_ns == 0) s.warned = false;  // (paid back: past half again is said again)
    bool over = s.ahead_ns > limit_ns_, halfway = !s.warned && s.ahead_ns > limit_ns_ / 2;
    if (over || halfway) {
      Finding found{key.first, key.second, s.fraction, s.ahead_ns, over, {}};
      if (u != used.end()) found.processes = u->second.second;
      if (over) addWorkers(found.processes, key.first, leases);
      findings.push_back(std::move(found));
      s.warned = true;
    }
    if (over) continue;  // (its processes end: it starts anew)
    if (s.ahead_ns > 0 || fraction.count(key)) next[key] = s;
  }
  state_ = std::move(next);
  return findings;
}

std::map<std::string, int64_t> ComputeAudit::ahead() const {
  std::map<std::string, int64_t> most;
  for (const auto& [key, s] : state_) most[key.first] = std::max(most[key.first], s.ahead_ns);
  return most;
}

}  // namespace gpool::server
