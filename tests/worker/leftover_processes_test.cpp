// What workers leave running (server/src/leftover_processes.h): a subreaper's orphaned descendants become
// its children, and its children that are not workers are named. Real processes.
#include "leftover_processes.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

namespace gpool::server {
namespace {

bool names(const std::vector<pid_t>& pids, pid_t pid) { return std::find(pids.begin(), pids.end(), pid) != pids.end(); }

TEST(LeftoverProcesses, AChildThatIsNoWorkerIsALeftover) {
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  EXPECT_TRUE(names(leftovers([](pid_t) { return false; }), child));
  EXPECT_FALSE(names(leftovers([&](pid_t p) { return p == child; }), child));  // a worker
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST(LeftoverProcesses, WhatAChildStartsApartBecomesTheSubreapersChild) {
  // In a process of its own (the subreaper setting stays with the process that made it).
  pid_t reaper = ::fork();
  if (reaper == 0) {
    if (!adoptOrphans()) ::_exit(2);
    int ready[2];
    if (::pipe(ready) != 0) ::_exit(3);
    pid_t worker = ::fork();
    if (worker == 0) {                        // the worker starts a process apart: setsid, a second fork
      ::setsid();
      if (::fork() == 0) {
        pid_t me = ::getpid();
        (void)!::write(ready[1], &me, sizeof me);
        ::pause();
        ::_exit(0);
      }
      ::_exit(0);  // its parent ends at once
    }
    ::waitpid(worker, nullptr, 0);
    pid_t apart = 0;
    if (::read(ready[0], &apart, sizeof apart) != sizeof apart) ::_exit(4);
    bool found = false;
    for (int i = 0; i < 100 && !found; ++i, ::usleep(10000)) found = names(leftovers([](pid_t) { return false; }), apart);
    ::kill(apart, SIGKILL);
    ::_exit(found ? 0 : 5);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(reaper, &status, 0), reaper);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: not a subreaper; 5: the process started apart was not its child";
}

TEST(LeftoverProcesses, ACommandNameIsPrintable) {
  EXPECT_EQ(commandOf(::getpid()).find('\n'), std::string::npos);
  EXPECT_EQ(commandOf(999999999), "?");
}

}  // namespace
}  // namespace gpool::server
