// Where the client library learns its lease's shares: from the environment `gpool run` sets
// (GPOOL_SHARES, or GPOOL_SERVER/GPOOL_DEVICE/GPOOL_TOKEN for one share), or from a `gpool lease` helper it
// starts when only GPOOL_ALLOCATOR is set. CUDA_VISIBLE_DEVICES then picks among them, as it picks among a
// machine's GPUs (visible_devices.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpool::client {

// One share of a lease: the gpool-server serving it, the server's device, and the lease's token for it.
struct Share {
  std::string address;
  uint32_t device = 0;
  std::string token;
};

// The lease's shares, in device order; empty with `why` set when there is no lease.
std::vector<Share> leaseShares(std::string& why);

// GPOOL_SHARES's format: one entry per share, separated by commas, each "ADDRESS DEVICE TOKEN".
std::vector<Share> parseShares(const std::string& text, std::string& why);

}  // namespace gpool::client
