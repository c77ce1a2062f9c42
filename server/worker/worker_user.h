// The user a worker serves its client as (gpool-server --worker-uids): the server starts it as root, and
// the worker becomes its lease's user before it reads a byte from its client. So a worker that its client
// took over holds only what that user may: not the server's key, not another lease's workers or files.
#pragma once

#include <sys/types.h>

#include <string>

namespace gpool::worker {

// Becomes `uid`:`gid` for good: real, effective and saved ids, and no supplementary groups. The process
// stays dumpable (a change of user would make it not), so the lease's other workers, which run as the
// same user, may still reach its descriptors as CUDA IPC between them needs. `max_threads` (0: no limit)
// bounds the threads and processes the user may have (RLIMIT_NPROC, counted per user: the whole lease's),
// so a worker taken over cannot fork the host to a halt. False, with why, when it cannot.
bool becomeUser(uid_t uid, gid_t gid, unsigned max_threads, std::string& why);

}  // namespace gpool::worker
