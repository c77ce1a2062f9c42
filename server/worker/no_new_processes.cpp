#include "no_new_processes.h"

#include <sched.h>
#include <seccomp.h>
#include <sys/prctl.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace gpool::worker {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr scmp_datum_t kThreadLike = CLONE_THREAD | CLONE_UNTRACED;  // (LeakSanitizer's tracer: see the header)
#else
constexpr scmp_datum_t kThreadLike = CLONE_THREAD;
#endif

}  // namespace

bool forbidNewProcesses(std::string& why) {
  std::unique_ptr<void, decltype(&seccomp_release)> filter(seccomp_init(SCMP_ACT_ALLOW), seccomp_release);
  if (!filter) {
    why = "seccomp_init failed";
    return false;
  }
  // Every thread of the process, not the calling one alone: a thread started before (a watcher, the driver's)
  // would otherwise stay free of it, and code the client got to run there could fork.
  int rc = seccomp_attr_set(filter.get(), SCMP_FLTATR_CTL_TSYNC, 1);
  auto refuse = [&](int error, int syscall, unsigned count, const scmp_arg_cmp* arg) {
    if (rc == 0) rc = count ? seccomp_rule_add_array(filter.get(), SCMP_ACT_ERRNO(error), syscall, count, arg)
                            : seccomp_rule_add(filter.get(), SCMP_ACT_ERRNO(error), syscall, 0);
  };
  const scmp_arg_cmp new_process = SCMP_A0(SCMP_CMP_MASKED_EQ, kThreadLike, 0);  // clone's flags name no thread
  const scmp_arg_cmp death_signal = SCMP_A0(SCMP_CMP_EQ, PR_SET_PDEATHSIG);
  refuse(EPERM, SCMP_SYS(clone), 1, &new_process);
  refuse(ENOSYS, SCMP_SYS(clone3), 0, nullptr);
  refuse(EPERM, SCMP_SYS(fork), 0, nullptr);
  refuse(EPERM, SCMP_SYS(vfork), 0, nullptr);
  refuse(EPERM, SCMP_SYS(prctl), 1, &death_signal);
  if (rc == 0) rc = seccomp_load(filter.get());  // (sets no_new_privs first, as an unprivileged filter needs)
  if (rc != 0) {
    why = std::string("seccomp: ") + std::strerror(-rc);
    return false;
  }
  return true;
}

}  // namespace gpool::worker
