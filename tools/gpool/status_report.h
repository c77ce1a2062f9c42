// gpool status and gpool usage: what the allocator says of servers, GPUs, leases, queues and the wait
// queue, and the GPU time each user and group had, printed as tables or as the allocator's JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "allocator_client.h"

namespace gpool::cli {

int status(AllocatorClient& a, bool as_json);
// `since`: how far back to count, as a duration ("168h"); dies with a usage message when it is not one.
int usage(AllocatorClient& a, const std::string& since, bool as_json);
// The QUEUE table (gpool status, gpool admin queue).
void printQueues(const nlohmann::json& queues);

}  // namespace gpool::cli
