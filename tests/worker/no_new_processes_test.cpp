// A worker starts no process and keeps its parent-death signal (server/worker/no_new_processes.h), with or
// without Landlock: what a worker taken over by its client would do to outlive a gpool-server killed with
// kill -9, refused; what a worker needs (threads) still works.
#include "no_new_processes.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>

#include "in_child.h"

namespace gpool::worker {
namespace {

// What `act` returned in a child that applied the filter first; -1 when it could not.
int underFilter(const std::function<int()>& act) {
  return inChild([] { std::string why; return forbidNewProcesses(why); }, act);
}

// Ended: not in the process table, or a zombie its new parent has not reaped yet.
bool ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  return close == std::string::npos || text.compare(close + 2, 1, "Z") == 0;
}

int errnoOf(pid_t started) {
  if (started == 0) ::_exit(0);
  if (started > 0) ::waitpid(started, nullptr, 0);
  return started > 0 ? 0 : errno;
}

extern "C" char** environ;

TEST(NoNewProcesses, NoForkVforkCloneOrSpawnStartsAProcess) {
  EXPECT_EQ(underFilter([] { return errnoOf(::fork()); }), EPERM);
  EXPECT_EQ(underFilter([] { return errnoOf(static_cast<pid_t>(::syscall(SYS_fork))); }), EPERM);
  EXPECT_EQ(underFilter([] { return errnoOf(static_cast<pid_t>(::syscall(SYS_vfork))); }), EPERM);
  EXPECT_EQ(underFilter([] { return errnoOf(static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, 0))); }), EPERM);
  EXPECT_EQ(underFilter([] {
              pid_t pid = 0;
              char* argv[] = {const_cast<char*>("true"), nullptr};
              int rc = ::posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ);
              if (rc == 0) ::waitpid(pid, nullptr, 0);
              return rc;
            }),
            EPERM);
  EXPECT_EQ(errnoOf(::fork()), 0) << "outside the filter, processes start";
}

TEST(NoNewProcesses, TheParentDeathSignalStaysAndThreadsStillStart) {
  EXPECT_EQ(underFilter([] { return ::prctl(PR_SET_PDEATHSIG, 0) == 0 ? 0 : errno; }), EPERM);
  EXPECT_EQ(underFilter([] {
              int ran = 0;
              std::thread([&] { ran = 1; }).join();  // (glibc: clone3 refused, then clone with CLONE_THREAD)
              return ran == 1 ? 0 : 1;
            }),
            0);
}

// Threads started before the filter are under it too (else code run there could still fork).
TEST(NoNewProcesses, ThreadsStartedBeforeAreUnderItToo) {
  EXPECT_EQ(inChild([] { return true; },
                    [] {
                      std::mutex m;
                      std::condition_variable cv;
                      int stage = 0, forked = -1;
                      std::thread before([&] {
                        std::unique_lock lock(m);
                        cv.wait(lock, [&] { return stage == 1; });
                        forked = errnoOf(::fork());
                        stage = 2;
                        cv.notify_all();
                      });
                      std::string why;
                      bool filtered = forbidNewProcesses(why);
                      {
                        std::unique_lock lock(m);
                        stage = 1;
                        cv.notify_all();
                        cv.wait(lock, [&] { return stage == 2; });
                      }
                      before.join();
                      return filtered ? forked : -3;
                    }),
            EPERM);
}

// A child that asked for SIGKILL at its parent's end, then applied the filter, dies with its parent even
// after trying to undo it: its parent (the stand-in for gpool-server) is killed with SIGKILL.
TEST(NoNewProcesses, AFilteredChildDiesWithItsParentKilledWithSigkill) {
  int told[2];
  ASSERT_EQ(::pipe(told), 0);
  pid_t server = ::fork();
  if (server == 0) {
    pid_t worker = ::fork();
    if (worker == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::string why;
      if (!forbidNewProcesses(why)) ::_exit(3);
      ::prctl(PR_SET_PDEATHSIG, 0);  // (refused)
      ::signal(SIGTERM, SIG_IGN);
      pid_t self = ::getpid();
      if (::write(told[1], &self, sizeof self) != sizeof self) ::_exit(4);
      for (;;) ::pause();
    }
    for (;;) ::pause();
  }
  pid_t worker = 0;
  ASSERT_EQ(::read(told[0], &worker, sizeof worker), static_cast<ssize_t>(sizeof worker));
  ::kill(server, SIGKILL);
  ::waitpid(server, nullptr, 0);
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {  // (up to 5 s: the kernel delivers the signal at once)
    gone = ended(worker);
    if (!gone) ::usleep(10'000);
  }
  if (!gone) ::kill(worker, SIGKILL);
  EXPECT_TRUE(gone) << "the worker outlived its server";
  ::close(told[0]), ::close(told[1]);
}

}  // namespace
}  // namespace gpool::worker
