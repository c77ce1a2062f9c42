// What workers leave running. gpool-server is its workers' subreaper (PR_SET_CHILD_SUBREAPER): a process a
// worker started that outlives its parent (one a worker taken over by its client started apart, with
// setsid and a second fork, or one left as its worker ended) becomes the server's child, not init's. The
// server starts nothing that outlives a call but workers, so each of its children that is not a worker
// was left by one, and is killed once the server looks: when a worker ends, and at each memory audit.
// With --worker-uids, a lease's user is cleared as well (worker_users.h); this holds without it too.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace gpool::server {

// Makes this process the subreaper of its descendants; false (errno set) when the kernel refuses.
bool adoptOrphans();

// This process's children that `worker` does not name: what workers left (gpool/process_table.h).
std::vector<pid_t> leftovers(const std::function<bool(pid_t)>& worker);

// The parent /proc gives `pid` (0: gone, or unreadable).
pid_t parentOf(pid_t pid);

// The command name /proc gives `pid` ("?" when gone), printable.
std::string commandOf(pid_t pid);

}  // namespace gpool::server
