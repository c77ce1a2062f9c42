// What the scheduler's unit tests build on: a server of N H100-like GPUs, a scheduler under a policy
// (tokens are "tok-" + the lease id; the unix clock stands still), and a request that waits for ever.
#pragma once

#include <cstdint>
#include <string>

#include "policy.h"
#include "scheduler.h"

namespace gpool::allocator::fixtures {

inline constexpr uint64_t kGiB = 1ull << 30;

inline Server server(const std::string& name, int gpus, uint64_t memory = 80 * kGiB) {
  Server s;
  s.name = name;
  s.address = "10.0.0.1:7420";
  for (int i = 0; i < gpus; ++i) s.gpus.push_back(Gpu{i, "GPU-" + name + std::to_string(i), "H100", memory, 132});
  return s;
}

// A server of `gpus` GPUs of one model (its GPU type follows from it).
inline Server typed(const std::string& name, int gpus, const std::string& model) {
  Server s = server(name, gpus);
  for (auto& g : s.gpus) g.model = model;
  return s;
}

inline Scheduler make(const std::string& toml) {
  return Scheduler(parsePolicy(toml), [](const Lease& l, const Share&, int, int64_t) { return "tok-" + l.id; }, [] { return int64_t{1000}; });
}

// What parsePolicy says about `toml`: its error, or "accepted".
inline std::string policyError(const std::string& toml) {
  try {
    parsePolicy(toml);
  } catch (const PolicyError& e) {
    return e.what();
  }
  return "accepted";
}

inline LeaseRequest req(const std::string& user, double p = 1.0, int n = 1) {
  LeaseRequest r;
  r.user = user;
  r.p = p;
  r.n = n;
  r.wait_ms = -1;
  return r;
}

}  // namespace gpool::allocator::fixtures
