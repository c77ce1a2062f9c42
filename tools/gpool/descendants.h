// What gpool run's command leaves behind. gpool run is its command's subreaper: a process the command
// leaves running (a job started with `&`, a daemon, the program of a wrapper shell that a signal ended)
// becomes gpool's child when its parent exits, so gpool can end it before it releases the lease, and no
// process of the command outlives the lease it ran on.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "gpool/process_table.h"  // (procStat, children: what /proc says)

namespace gpool::cli {

// Makes this process the subreaper of the processes it starts (prctl PR_SET_CHILD_SUBREAPER).
void becomeSubreaper();

// Waits for child `pid` and returns its wait status, reaping meanwhile the orphans that came to gpool and
// ended (they would stay zombies otherwise).
int waitForChild(pid_t pid);

// Ends the processes the command left (after half a second for those on their way out): SIGTERM (and
// SIGCONT, for a stopped one), then SIGKILL at `stop_by()`, or as soon as `revoked()` says the lease's
// GPUs are gone; returns once none is left. Says on stderr what it ends, and why.
void endLeftovers(const std::function<std::chrono::steady_clock::time_point()>& stop_by, const std::function<bool()>& revoked);

}  // namespace gpool::cli
