// The keeper of a stopped gpool run's lease (stopped_keeper.h).
#include "stopped_keeper.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "descendants.h"

namespace gpool::cli {

namespace fs = std::filesystem;

namespace {

bool singleThreaded() {
  std::error_code ec;
  size_t tasks = 0;
  for (fs::directory_iterator it("/proc/self/task", ec), end; !ec && it != end; it.increment(ec)) ++tasks;
  return !ec && tasks == 1;
}

// Whether process `pid` is stopped (job control, or traced).
bool stopped(pid_t pid) {
  auto st = procStat(pid);
  return st && (st->state == 'T' || st->state == 't');
}

[[noreturn]] void keep(std::unique_ptr<AllocatorClient> a, const std::string& id, pid_t gpool, int every_ms) {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(every_ms));
    if (::getppid() != gpool) _exit(0);  // gpool is gone (and PR_SET_PDEATHSIG raced it)
    if (stopped(gpool)) a->call("POST", "/v1/leases/" + id + "/heartbeat", Proof::kLease, "");
  }
}

}  // namespace

StoppedKeeper::StoppedKeeper(const AllocatorClient& a, const std::string& id, int every_ms) {
  if (!singleThreaded()) return;
  auto client = a.another();
  const pid_t gpool = ::getpid();
  pid_t pid = ::fork();
  if (pid != 0) {
    pid_ = pid > 0 ? pid : 0;
    if (pid_) ::setpgid(pid_, pid_);  // (as the child does: whichever runs first, no signal to ours reaches it)
    return;
  }
  // Out of the terminal's process group (Ctrl-Z and Ctrl-C are not for it), silent, and gone with gpool.
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (int sig : {SIGINT, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGHUP, SIGUSR1, SIGUSR2}) ::signal(sig, SIG_IGN);
  ::signal(SIGTERM, SIG_DFL);
  if (int null = ::open("/dev/null", O_RDWR); null >= 0) {
    for (int fd : {0, 1, 2}) ::dup2(null, fd);
    if (null > 2) ::close(null);
  }
  keep(std::move(client), id, gpool, every_ms);
}

StoppedKeeper::~StoppedKeeper() {
  if (!pid_) return;
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace gpool::cli
