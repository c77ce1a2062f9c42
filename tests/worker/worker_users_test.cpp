// Which uid each lease's workers run as (server/src/worker_users.h): the range gpool-server is given, one
// uid per lease, and what is left running as a uid when it is let go.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "export_records.h"
#include "worker_users.h"

namespace gpool::server {
namespace {

TEST(WorkerUsers, ARangeIsFirstToLastOrOneUidAndNeverRoots) {
  std::string why;
  auto r = WorkerUsers::parse("61000-61255", why);
  ASSERT_TRUE(r) << why;
  EXPECT_EQ(r->first, 61000u);
  EXPECT_EQ(r->last, 61255u);
  r = WorkerUsers::parse("61000", why);
  ASSERT_TRUE(r) << why;
  EXPECT_EQ(r->first, r->last);
  for (const char* bad : {"", "-", "0-10", "61255-61000", "61000-", "a-b", "61000-61255x", "-61000", "1-5000", "61000 - 61001"})
    EXPECT_FALSE(WorkerUsers::parse(bad, why)) << bad;
  EXPECT_FALSE(WorkerUsers::parse("0-10", why));
  EXPECT_NE(why.find("not root's"), std::string::npos) << why;
}

TEST(WorkerUsers, TheModuleCacheIsMadeForEveryUserOrRefusedWhereTheyCannotReachIt) {
  namespace fs = std::filesystem;
  fs::path base = fs::temp_directory_path() / ("gpool-share-test-" + std::to_string(getpid()));
  fs::create_directories(base / "closed");
  fs::permissions(base / "closed", fs::perms::owner_all);
  EXPECT_THROW(WorkerUsers::shareDirectory((base / "closed" / "cache").string()), std::runtime_error);
  EXPECT_FALSE(fs::exists(base / "closed" / "cache")) << "nothing made where it is refused";
  WorkerUsers::shareDirectory((base / "open" / "cache").string());
  EXPECT_EQ(fs::status(base / "open" / "cache").permissions() & fs::perms::all, fs::perms::all);
  fs::remove_all(base);
}

TEST(WorkerUsers, EachLeaseHasAUidOfItsOwnUntilItLetsItGo) {
  if (geteuid() != 0) GTEST_SKIP() << "--worker-uids needs root";
  WorkerUsers users({61180, 61181});
  auto a = users.take("La"), again = users.take("La"), b = users.take("Lb");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *again) << "one lease's workers share their user";
  EXPECT_NE(*a, *b);
  EXPECT_FALSE(users.take("Lc")) << "every uid of the range serves another lease";
  users.release("La");
  auto c = users.take("Lc");
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, *a) << "a uid let go serves the next lease";
  EXPECT_EQ(users.inUse(), 2u);
}

TEST(WorkerUsers, ClearingAUidKillsItsProcessesAndRemovesItsRecords) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run a process as another user";
  const uid_t uid = 61182;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t left = fork();  // what a worker taken over left behind
  ASSERT_GE(left, 0);
  if (left == 0) {
    if (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(1);
    (void)!write(ready[1], "u", 1);
    pause();
    _exit(0);
  }
  pid_t mine = fork();  // a process of another user (this test's), which stays
  ASSERT_GE(mine, 0);
  if (mine == 0) {
    pause();
    _exit(0);
  }
  std::string records = budget::recordDirectory(uid);
  std::filesystem::create_directories(records);
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);  // the first child is the uid now
  close(ready[0]), close(ready[1]);
  WorkerUsers::clear(uid);
  int status = 0;
  ASSERT_EQ(waitpid(left, &status, 0), left);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_EQ(waitpid(mine, &status, WNOHANG), 0) << "another user's process is not touched";
  EXPECT_FALSE(std::filesystem::exists(records));
  kill(mine, SIGKILL);
  waitpid(mine, &status, 0);
}

}  // namespace
}  // namespace gpool::server
