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
