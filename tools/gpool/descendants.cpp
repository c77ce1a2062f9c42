// What gpool run's command leaves behind (descendants.h).
#include "descendants.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "gpool/printable.h"

namespace gpool::cli {

void becomeSubreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    std::fprintf(stderr, "gpool: cannot become the subreaper of the command (%s): processes it leaves running may outlive the lease\n",
                 std::strerror(errno));
}

namespace {

// Reaps every child that has ended; false when no child is left.
bool reapEnded() {
  for (;;) {
    pid_t r = ::waitpid(-1, nullptr, WNOHANG);
    if (r > 0) continue;
    if (r < 0 && errno == EINTR) continue;
    return r == 0;
  }
}

// How long processes SIGKILL does not end may hold the lease.
constexpr auto kKillWait = std::chrono::seconds(10);

std::string listed(const std::vector<Child>& left) {
  std::string out;
  for (size_t i = 0; i < left.size() && i < 5; ++i)
    out += (i ? ", " : "") + std::to_string(left[i].pid) + " " + gpool::printable(left[i].name);  // (a name is the process's to choose)
  if (left.size() > 5) out += ", ...";
  return out;
}

void signalAll(const std::vector<Child>& left, int sig) {
  for (const auto& c : left) ::kill(c.pid, sig);
}

}  // namespace

int waitForChild(pid_t pid) {
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(-1, &status, 0);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return 0;  // (no child at all: not ours to wait for)
  }
}

void endLeftovers(const std::function<std::chrono::steady_clock::time_point()>& stop_by, const std::function<bool()>& revoked) {
  // A moment for those already on their way out (a helper that exits when its parent's pipe closes).
  for (auto settle = std::chrono::steady_clock::now() + std::chrono::milliseconds(500); std::chrono::steady_clock::now() < settle;) {
    if (!reapEnded()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto left = children();
  if (left.empty()) return;
  const bool at_once = revoked();
  const auto deadline = stop_by();
  double grace = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
  const std::string how = at_once ? "the lease's GPUs are revoked: SIGKILL"
                                  : "SIGTERM now, SIGKILL in " + std::to_string(static_cast<int>(grace + 0.5)) + " s unless they exit";
  std::fprintf(stderr, "gpool: the command exited and left %zu process%s running (%s); ending them before the lease is released: %s\n",
               left.size(), left.size() == 1 ? "" : "es", listed(left).c_str(), how.c_str());
  if (!at_once) {
    signalAll(left, SIGTERM);
    signalAll(left, SIGCONT);
    while (reapEnded() && std::chrono::steady_clock::now() < deadline && !revoked())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Until none is left: one that a leftover started, orphaned as that one dies, comes to gpool meanwhile.
  // A process that SIGKILL does not end (stuck in the kernel) keeps the lease no longer than kKillWait.
  const auto give_up = std::chrono::steady_clock::now() + kKillWait;
  for (bool told = at_once; reapEnded(); told = true) {
    left = children();
    if (!told && !left.empty()) std::fprintf(stderr, "gpool: still running: %s: SIGKILL\n", listed(left).c_str());
    if (std::chrono::steady_clock::now() >= give_up) {
      std::fprintf(stderr, "gpool: %s did not end %d s after SIGKILL (stuck in the kernel?); the lease is released without waiting for them\n",
                   listed(left).c_str(), static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(kKillWait).count()));
      return;
    }
    signalAll(left, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace gpool::cli
