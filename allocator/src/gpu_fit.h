// How many shares of a request fit on a GPU, and which GPUs take new shares: what placing a request
// (scheduler.cpp) and making room for one by preemption (preemption.cpp) both count by.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "policy.h"
#include "scheduler.h"

namespace gpool::allocator {

// How many shares of `fraction` fit beside `used` of a GPU, at most `n`.
inline int sharesOfFraction(double used, double fraction, int n) {
  constexpr double kEps = 1e-9;
  if (fraction <= kEps) return n;
  return std::min(n, static_cast<int>(std::floor((1.0 - used + kEps) / fraction)));
}

// How many shares of `fraction` and `memory` the GPU has room for now, at most `n`.
inline int sharesThatFit(const Gpu& g, double fraction, uint64_t memory, int n) {
  int by_fraction = sharesOfFraction(g.used_fraction, fraction, n);
  int by_memory = memory == 0 ? n : static_cast<int>(std::min<uint64_t>((g.memory - std::min(g.memory, g.used_memory)) / memory, n));
  return std::max(0, std::min({by_fraction, by_memory, n}));
}

// The memory of one share of `p` of GPU g that request r takes.
inline uint64_t shareMemory(const LeaseRequest& r, double p, const Gpu& g) {
  return r.m ? r.m : static_cast<uint64_t>(std::floor(p * static_cast<double>(g.memory)));
}

// Calls fn(server, gpu, heard) for each GPU of the servers in `pool` that take new shares (up, not
// draining). heard: the server has said which leases it serves; until it has, its GPUs may still hold
// ended ones, so they take no new share.
template <typename Servers, typename Fn>
void forEachOpenGpu(Servers& servers, const Policy& policy, const std::map<std::string, std::set<std::string>>& serving,
                    const std::string& pool, Fn fn) {
  for (auto& [name, s] : servers) {
    const Pool* sp = policy.poolOfServer(name);
    if (!sp || sp->name != pool || !s.up || s.drain) continue;
    const bool heard = serving.count(name) > 0;
    for (auto& g : s.gpus) fn(s, g, heard);
  }
}

}  // namespace gpool::allocator
