// Accounting (usage.h).
#include "usage.h"

#include <algorithm>
#include <utility>

namespace gpool::allocator {

std::vector<Usage> usageBetween(const std::map<std::string, Lease>& leases, int64_t from_s, int64_t to_s, int64_t now_s) {
  std::map<std::pair<std::string, std::string>, Usage> by;
  for (const auto& [id, l] : leases) {
    if (l.granted_unix_s <= 0) continue;
    const int64_t end = l.state == LeaseState::kEnded ? (l.ended_unix_s > 0 ? l.ended_unix_s : l.granted_unix_s) : now_s;
    if (l.granted_unix_s >= to_s || end < from_s) continue;  // held entirely outside the window
    const double held = static_cast<double>(std::max<int64_t>(0, std::min(end, to_s) - std::max(l.granted_unix_s, from_s)));
    Usage& u = by[{l.req.user, l.req.group}];
    u.user = l.req.user;
    u.group = l.req.group;
    ++u.leases;
    for (const Share& s : l.shares) {
      u.gpu_seconds += s.fraction * held;
      u.memory_gib_seconds += static_cast<double>(s.memory) / static_cast<double>(1ull << 30) * held;
    }
  }
  std::vector<Usage> out;
  for (auto& [key, u] : by) out.push_back(std::move(u));
  std::stable_sort(out.begin(), out.end(), [](const Usage& a, const Usage& b) { return a.gpu_seconds > b.gpu_seconds; });
  return out;
}

}  // namespace gpool::allocator
