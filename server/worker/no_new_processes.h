// What keeps a worker from outliving its gpool-server, even once its client took it over: it starts no
// process of its own (threads only), and keeps the parent-death signal it asked for (worker_main.cpp:
// SIGKILL when its server ends, however it ends, kill -9 included). A seccomp filter (libseccomp) refuses,
// with EPERM, clone without CLONE_THREAD, fork and vfork (and so posix_spawn and system), and
// prctl(PR_SET_PDEATHSIG); clone3, whose flags a filter cannot read, fails with ENOSYS, on which glibc
// makes its threads with clone. Exec stays allowed (the signal and the filter survive it). Entered with the
// sandbox (worker_sandbox.h), after the worker became its lease's user and asked for the signal; a process
// cannot leave a seccomp filter, and every thread is put under it, those started before too (TSYNC).
//
// In a build with AddressSanitizer, clone with CLONE_UNTRACED stays allowed: LeakSanitizer's tracer is
// made so at exit. (Sanitized builds are test builds.)
#pragma once

#include <string>

namespace gpool::worker {

// Applies the filter to this process; false, with `why`, when the kernel refuses it.
bool forbidNewProcesses(std::string& why);

}  // namespace gpool::worker
