// Accounting: the GPU time each user and group had in a window of wall-clock time, from the leases the
// allocator keeps (live ones, and ended ones for the policy's ended_lease_retention).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "scheduler.h"

namespace gpool::allocator {

struct Usage {
  std::string user, group;  // the group the leases were charged to
  int leases = 0;           // leases granted for some of the window
  double gpu_seconds = 0;   // each share's fraction of a GPU times the seconds it was held in the window
  double memory_gib_seconds = 0;  // each share's GPU memory (GiB) times those seconds
};

// Each (user, group)'s use of GPUs in [from_s, to_s) (unix seconds), most GPU time first. A lease counts
// from its grant to its end, or to `now_s` while it lasts; one granted before its grant time was kept
// (granted_unix_s 0) is left out.
std::vector<Usage> usageBetween(const std::map<std::string, Lease>& leases, int64_t from_s, int64_t to_s, int64_t now_s);

}  // namespace gpool::allocator
