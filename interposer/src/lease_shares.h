// Where the client library learns its lease's shares: from the environment `gpool run` sets
// (GPOOL_SHARES, or GPOOL_SERVER/GPOOL_DEVICE/GPOOL_TOKEN for one share), or from a `gpool lease` helper it
// starts when only GPOOL_ALLOCATOR is set. CUDA_VISIBLE_DEVICES then picks among them, as it picks among a
// machine's GPUs.
#pragma once

#include <string>
#include <vector>

namespace gpool::client {

struct Share;

// The shares this process uses, in device order; empty with `why` set when there is no lease.
std::vector<Share> leaseShares(std::string& why);

// GPOOL_SHARES's format: one entry per share, separated by commas, each "ADDRESS DEVICE TOKEN".
std::vector<Share> parseShares(const std::string& text, std::string& why);
// CUDA_VISIBLE_DEVICES over a lease's `count` devices: the indices it names, in its order, up to the first
// entry that is not one (as CUDA stops there); every index when it is unset.
std::vector<int> visibleDevices(const char* env, int count, std::string& ignored);

}  // namespace gpool::client
