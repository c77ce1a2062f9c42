// Which Landlock ABI this kernel offers (the sandbox gpool-worker shuts itself in: server/worker/worker_sandbox.h),
// asked by the worker before it applies its ruleset and by gpool-server once at start, to say whether its
// workers are sandboxed. Header-only: the two share nothing else of each other's.
#pragma once

#include <linux/landlock.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace gpool {

// The ABI (1 and up), or 0 and `why` when the kernel has none, has it turned off, or a seccomp filter refuses it.
inline int landlockAbi(std::string& why) {
  long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi >= 1) return static_cast<int>(abi);
  why = errno == EOPNOTSUPP ? "Landlock is turned off in this kernel (add landlock to its lsm= boot parameter)"
        : errno == ENOSYS   ? "this kernel has no Landlock (Linux 5.13 and later have it)"
                            : std::string("landlock_create_ruleset was refused (") + std::strerror(errno) +
                                  "): a seccomp filter, as a container runtime's, may refuse it";
  return 0;
}

}  // namespace gpool
