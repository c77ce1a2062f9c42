// Measured throughputs (throughput.h).
#include "throughput.h"

#include <algorithm>
#include <cmath>

namespace gpool::allocator {

namespace {
constexpr double kWeight = 0.2;  // of a new measurement in the moving average
}  // namespace

void Throughputs::add(const std::string& kind, const std::string& type, double rate, double fraction) {
  if (kind.empty() || !(rate >= 0) || !std::isfinite(rate) || !(fraction > 0)) return;
  Measured& m = measured_[kind][type];
  const double whole = rate / fraction;
  m.rate = m.samples == 0 ? whole : (1 - kWeight) * m.rate + kWeight * whole;
  ++m.samples;
}

bool Throughputs::measures(const Policy& policy, const std::string& kind) const {
  auto k = measured_.find(kind);
  if (k == measured_.end() || k->second.size() < 2) return false;
  auto table = policy.job_kinds.find(kind);
  if (table == policy.job_kinds.end()) return true;
  return std::all_of(table->second.begin(), table->second.end(), [&](const auto& t) { return k->second.count(t.first) > 0; });
}

double Throughputs::relative(const Policy& policy, const std::string& kind, const std::string& type) const {
  if (!measures(policy, kind)) return policy.relativeSpeed(kind, type);
  const auto& types = measured_.at(kind);
  auto here = types.find(type);
  if (here == types.end()) return policy.relativeSpeed(kind, type);  // a type it was never seen on
  double best = 0;
  for (const auto& [t, m] : types) best = std::max(best, m.rate);
  return best > 0 ? here->second.rate / best : 1.0;
}

bool Throughputs::knows(const Policy& policy, const std::string& kind) const {
  return policy.job_kinds.count(kind) > 0 || measures(policy, kind);
}

}  // namespace gpool::allocator
