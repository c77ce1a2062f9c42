// Each lease's user's JIT cache (server/src/jit_caches.h): a directory of its own under the root, named so
// that no two users share one and no name leads out of the root; refused where something else is in its place.
#include "jit_caches.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>

namespace gpool::server {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kBig = 1ull << 40;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/gpool-jit-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

mode_t modeOf(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

TEST(JitCaches, NoTwoUsersShareADirectoryAndNoNameLeadsOutOfTheRoot) {
  std::set<std::string> names;
  for (std::string user : std::initializer_list<std::string>{"alice", "Alice", "a.b", ".hidden", "..", ".", "a/b", "a%2Fb", "%", "a b", "x\n", std::string("z\0y", 3),
                           "\xc3\xa9t\xc3\xa9"}) {
    std::string name = JitCaches::directoryName(user);
    EXPECT_TRUE(names.insert(name).second) << user << " -> " << name;
    EXPECT_EQ(name.find('/'), std::string::npos) << user;
    EXPECT_NE(name[0], '.') << user;
    EXPECT_EQ(name.find('\0'), std::string::npos) << user;
  }
  EXPECT_EQ(JitCaches::directoryName("alice"), "alice");
  EXPECT_EQ(JitCaches::directoryName("svc-ci_2.x"), "svc-ci_2.x");
  EXPECT_EQ(JitCaches::directoryName("../etc"), "%2E.%2Fetc");
}

TEST(JitCaches, EachUserGetsADirectoryOfTheirOwnThatOnlyTheServersUserReaches) {
  TempDir tmp;
  JitCaches caches(tmp.path / "jit", kBig);
  EXPECT_EQ(modeOf(tmp.path / "jit"), 0700u);
  std::string why;
  auto alice = caches.of("alice", why), bob = caches.of("../bob", why);
  ASSERT_TRUE(alice && bob) << why;
  EXPECT_EQ(*alice, tmp.path / "jit" / "alice");
  EXPECT_EQ(bob->parent_path(), tmp.path / "jit");
  EXPECT_EQ(modeOf(*alice), 0700u);
  EXPECT_TRUE(fs::is_directory(*bob));
  std::ofstream(*alice / "entry") << "x";  // (what the driver keeps stays: the same directory next time)
  auto again = caches.of("alice", why);
  ASSERT_TRUE(again) << why;
  EXPECT_TRUE(fs::exists(*again / "entry"));
  ::chmod(alice->c_str(), 0777);  // a mode loosened meanwhile is tightened again
  ASSERT_TRUE(caches.of("alice", why)) << why;
  EXPECT_EQ(modeOf(*alice), 0700u);
}

TEST(JitCaches, ALinkOrFileInAUsersPlaceIsNeverTakenAsTheirDirectory) {
  TempDir tmp;
  JitCaches caches(tmp.path / "jit", kBig);
  fs::create_directory(tmp.path / "elsewhere");
  fs::create_directory_symlink(tmp.path / "elsewhere", tmp.path / "jit" / "mallory");
  std::ofstream(tmp.path / "jit" / "eve") << "x";
  std::string why;
  EXPECT_FALSE(caches.of("mallory", why));
  EXPECT_NE(why.find("not a directory"), std::string::npos) << why;
  EXPECT_FALSE(caches.of("eve", why));
  EXPECT_NE(why.find("user 'eve'"), std::string::npos) << why;
}

void fill(const fs::path& dir, size_t bytes) { std::ofstream(dir / "entry") << std::string(bytes, 'x'); }

// Past what they may hold together, the caches of the users whose workers were given them longest ago go
// whole, but those of users whose workers run; below it, nothing goes.
TEST(JitCaches, TheCachesUnusedLongestGoPastTheBoundButNotThoseInUse) {
  TempDir tmp;
  JitCaches caches(tmp.path / "jit", 2500);
  std::string why;
  int hours_ago = 4;
  for (const char* user : {"ann", "bob", "cat", "dan"}) {  // (ann's given longest ago)
    auto dir = caches.of(user, why);
    ASSERT_TRUE(dir) << why;
    fill(*dir, 1000);
    fs::create_directories(*dir / "sub");
    std::ofstream(*dir / "sub" / "more") << "xx";  // (what is below counts too)
    fs::last_write_time(*dir, fs::file_time_type::clock::now() - std::chrono::hours(hours_ago--));
  }
  EXPECT_EQ(caches.bound({}).users, (std::vector<std::string>{"ann", "bob"}));  // 4 × 1002 bytes: two go
  EXPECT_FALSE(fs::exists(tmp.path / "jit" / "ann"));
  EXPECT_FALSE(fs::exists(tmp.path / "jit" / "bob"));
  EXPECT_TRUE(fs::exists(tmp.path / "jit" / "cat" / "entry"));
  EXPECT_TRUE(caches.bound({}).users.empty());  // (within the bound now)

  ASSERT_TRUE(caches.of("bob", why)) << why;  // bob's again, used now: cat's is the oldest
  fill(tmp.path / "jit" / "bob", 1000);
  JitCaches::Removed removed = caches.bound({"cat"});  // but cat's workers run: dan's goes
  EXPECT_EQ(removed.users, std::vector<std::string>{"dan"});
  EXPECT_EQ(removed.bytes, 1002u);
  EXPECT_TRUE(fs::exists(tmp.path / "jit" / "cat"));
  EXPECT_TRUE(fs::exists(tmp.path / "jit" / "bob"));
}

uid_t ownerOf(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

constexpr uid_t kUidA = 61190, kUidB = 61191;  // (as --worker-uids gives them: no account's)

// With --worker-uids: a user's cache is one lease's uid's at a time, whole, and the server's again (closed)
// when the uid is freed, so the uid's next lease, another user's, reaches nothing of it.
TEST(JitCaches, WithWorkerUidsAUsersCacheIsLentToOneUidAtATimeAndGivenBackClosed) {
  if (::geteuid() != 0) GTEST_SKIP() << "lending a cache to another uid needs root (as --worker-uids does)";
  TempDir tmp;
  ::chmod(tmp.path.c_str(), 0711);
  JitCaches caches(tmp.path / "jit", kBig, true);
  EXPECT_EQ(modeOf(tmp.path / "jit"), 0711u) << "the workers' users pass through the root, and list nothing";
  std::string why;
  auto first = caches.of("ann", why);  // what an earlier lease's driver kept
  ASSERT_TRUE(first) << why;
  fs::create_directories(*first / "ComputeCache" / "a");
  std::ofstream(*first / "ComputeCache" / "a" / "entry") << "x";

  auto lent = caches.lend("ann", kUidA, why);
  ASSERT_TRUE(lent) << why;
  for (const fs::path& p : {*lent, *lent / "ComputeCache", *lent / "ComputeCache" / "a", *lent / "ComputeCache" / "a" / "entry"})
    EXPECT_EQ(ownerOf(p), kUidA) << p;
  EXPECT_EQ(modeOf(*lent), 0700u);
  EXPECT_EQ(caches.lend("ann", kUidA, why), lent) << "another worker of the same lease: " << why;
  auto bob = caches.lend("bob", kUidB, why);
  ASSERT_TRUE(bob) << why;
  EXPECT_EQ(caches.bound({}).users.size(), 0u) << "a lent cache is never removed";

  caches.giveBack(kUidA, kUidA);
  EXPECT_EQ(ownerOf(*lent), ::geteuid());
  EXPECT_EQ(modeOf(*lent), 0700u);
  EXPECT_EQ(ownerOf(*bob), kUidB) << "only the uid given back";
  auto again = caches.lend("ann", kUidB + 1, why);  // ann's next lease, on another uid: all of it is its
  ASSERT_TRUE(again) << why;
  EXPECT_EQ(ownerOf(*again / "ComputeCache" / "a" / "entry"), kUidB + 1);
}

// A user's leases that run here at once (on uids of their own) each get a cache of their own, up to
// kCachesPerUser: the first the user's first, the others ann+2, ann+3... (names no user's directory has:
// directoryName writes '+' as %2B). A lease given back, its cache goes to the user's next lease.
TEST(JitCaches, AUsersLeasesRunningAtOnceEachGetACacheOfTheirOwn) {
  if (::geteuid() != 0) GTEST_SKIP() << "lending a cache to another uid needs root (as --worker-uids does)";
  TempDir tmp;
  ::chmod(tmp.path.c_str(), 0711);
  JitCaches caches(tmp.path / "jit", kBig, true);
  std::string why;
  auto first = caches.lend("ann", kUidA, why);
  ASSERT_TRUE(first) << why;
  auto second = caches.lend("ann", kUidB, why);
  ASSERT_TRUE(second) << "ann's second lease, another uid, while the first runs: " << why;
  EXPECT_EQ(*first, tmp.path / "jit" / "ann");
  EXPECT_EQ(*second, tmp.path / "jit" / "ann+2");
  EXPECT_EQ(ownerOf(*second), kUidB);
  EXPECT_EQ(modeOf(*second), 0700u);
  EXPECT_EQ(ownerOf(*first), kUidA) << "the first lease's is still its own";
  EXPECT_EQ(caches.lend("ann", kUidB, why), second) << "the second lease's other worker: " << why;
  EXPECT_NE(*caches.of("ann+2", why), *second) << "a user named ann+2 has a directory of their own";

  caches.giveBack(kUidA, kUidA);
  EXPECT_EQ(caches.lend("ann", kUidB + 1, why), first) << "the first free one, to her next lease: " << why;
  for (uid_t uid = kUidB + 2; uid < kUidB + JitCaches::kCachesPerUser; ++uid)
    ASSERT_TRUE(caches.lend("ann", uid, why)) << uid << ": " << why;
  EXPECT_FALSE(caches.lend("ann", kUidB + 100, why)) << "more leases at once than she has caches";
  EXPECT_NE(why.find(std::to_string(JitCaches::kCachesPerUser) + " JIT caches"), std::string::npos) << why;
  EXPECT_EQ(caches.bound({}).users.size(), 0u) << "a lent cache is never removed";
}

// While lent, a taken-over worker may leave links there: lending the cache again makes no file it does not
// own another uid's. A symbolic link is never followed; a file with a second link (a root's file linked in,
// where the kernel allows it) keeps its owner.
TEST(JitCaches, LendingAgainFollowsNoLinkAndHandsOverNoFileWithAnotherLink) {
  if (::geteuid() != 0) GTEST_SKIP() << "lending a cache to another uid needs root (as --worker-uids does)";
  TempDir tmp;
  ::chmod(tmp.path.c_str(), 0711);
  JitCaches caches(tmp.path / "jit", kBig, true);
  std::ofstream(tmp.path / "secret") << "root's";
  std::string why;
  auto dir = caches.lend("mallory", kUidA, why);
  ASSERT_TRUE(dir) << why;
  fs::create_symlink(tmp.path / "secret", *dir / "link");
  fs::create_directory_symlink(tmp.path, *dir / "dirlink");
  fs::create_hard_link(tmp.path / "secret", *dir / "hard");
  caches.giveBack(kUidA, kUidA);
  ASSERT_TRUE(caches.lend("mallory", kUidB, why)) << why;
  EXPECT_EQ(ownerOf(tmp.path / "secret"), 0u) << "neither through the link nor the second name";
  EXPECT_EQ(ownerOf(tmp.path), 0u) << "nor through a link to a directory";
  EXPECT_EQ(ownerOf(*dir), kUidB);
}

// A server ended while its workers held caches: the next one (its uids cleared) takes them back at start.
TEST(JitCaches, CachesLentWhenTheServerEndedAreGivenBack) {
  if (::geteuid() != 0) GTEST_SKIP() << "lending a cache to another uid needs root (as --worker-uids does)";
  TempDir tmp;
  ::chmod(tmp.path.c_str(), 0711);
  std::string why;
  fs::path dir;
  {
    JitCaches before(tmp.path / "jit", kBig, true);
    auto lent = before.lend("ann", kUidA, why);
    ASSERT_TRUE(lent) << why;
    dir = *lent;
  }
  JitCaches after(tmp.path / "jit", kBig, true);
  EXPECT_FALSE(after.of("ann", why)) << "still uid 61190's";
  after.giveBack(kUidA, kUidB);
  EXPECT_EQ(ownerOf(dir), ::geteuid());
  EXPECT_TRUE(after.lend("ann", kUidB, why)) << why;
}

TEST(JitCaches, WithWorkerUidsARootOtherUsersCannotReachIsRefusedNamingTheFix) {
  TempDir tmp;  // (mode 0700: closed to other users)
  try {
    JitCaches caches(tmp.path / "jit", kBig, true);
    FAIL() << "a root the workers' users cannot reach";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/var/cache/gpool/jit"), std::string::npos) << e.what();
  }
}

TEST(JitCaches, ARootThatCannotBeADirectoryIsRefusedNamingTheOption) {
  TempDir tmp;
  std::ofstream(tmp.path / "file") << "x";
  try {
    JitCaches caches(tmp.path / "file", kBig);
    FAIL() << "a file taken as the root";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--jit-cache"), std::string::npos) << e.what();
  }
  JitCaches nested(tmp.path / "a" / "b", kBig);  // missing parents are made
  EXPECT_TRUE(fs::is_directory(tmp.path / "a" / "b"));
}

}  // namespace
}  // namespace gpool::server
