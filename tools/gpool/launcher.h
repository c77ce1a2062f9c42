// gpool run and gpool lease: request a lease and wait for it (with back-off, showing the queue), run the
// command with gpool's client library and the lease in its environment, keep the lease alive, forward
// signals, pass preemption notice on (a file, then SIGTERM, then the grace period), requeue a preempted
// command when asked to, and release the lease however the command ends.
#pragma once

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "allocator_client.h"

namespace gpool::cli {

struct RunOptions {
  nlohmann::json request;  // the lease request (POST /v1/leases)
  double wait_s = -1;      // how long to wait in the queue (-1: for ever)
  bool requeue = false;    // run a preempted command again once granted again
  std::vector<std::string> command;
};

// gpool run: the command's exit status, or one of gpool's (cli_common.h).
int run(AllocatorClient& a, const RunOptions& o);
// gpool lease: prints the lease's environment as one line of JSON, keeps it until stdin closes. `holder`
// (0: none) is the process it holds the lease for: preemption notice reaches it as it reaches the command
// of gpool run (GPOOL_PREEMPT_FILE when set, SIGTERM, SIGKILL when the GPUs are revoked).
int holdLease(AllocatorClient& a, const nlohmann::json& request, double wait_s, pid_t holder);

}  // namespace gpool::cli
