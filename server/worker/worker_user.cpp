// The worker becomes its lease's user (worker_user.h).
#include "worker_user.h"

#include <grp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpool::worker {

bool becomeUser(uid_t uid, gid_t gid, unsigned max_threads, std::string& why) {
  auto failed = [&](const char* step) {
    why = std::string(step) + " failed: " + std::strerror(errno);
    return false;
  };
  if (max_threads) {  // (set as root: the user may lower it, never raise it past this)
    rlimit r{max_threads, max_threads};
    if (::setrlimit(RLIMIT_NPROC, &r) != 0) return failed("setrlimit(RLIMIT_NPROC)");
  }
  // Groups first: once the uid is no longer root, they cannot be changed.
  if (::setgroups(0, nullptr) != 0) return failed("setgroups");
  if (::setresgid(gid, gid, gid) != 0) return failed("setresgid");
  if (::setresuid(uid, uid, uid) != 0) return failed("setresuid");
  uid_t r, e, s;
  gid_t gr, ge, gs;
  if (::getresuid(&r, &e, &s) != 0 || r != uid || e != uid || s != uid || ::getresgid(&gr, &ge, &gs) != 0 || gr != gid ||
      ge != gid || gs != gid || ::setuid(0) == 0) {
    why = "the user did not change for good";
    return false;
  }
  if (::prctl(PR_SET_DUMPABLE, 1) != 0) return failed("PR_SET_DUMPABLE");
  return true;
}

}  // namespace gpool::worker
