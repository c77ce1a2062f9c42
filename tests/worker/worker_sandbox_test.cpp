// The sandbox a worker shuts itself in (server/worker/worker_sandbox.h), applied in a child process: what it
// still reaches (the system's files, its module cache, /dev/shm by name) and what it no longer does (files
// elsewhere, another process's memory, environment and command line, tracing it or signalling it).
#include "worker_sandbox.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "gpool/landlock_abi.h"
#include "in_child.h"

namespace gpool::worker {
namespace {

namespace fs = std::filesystem;

// The errno `act` failed with in a child that entered the sandbox first (0: it succeeded); -1 when the child
// could not enter it.
int inSandbox(const SandboxPaths& paths, const std::function<int()>& act) {
  return inChild([&] { std::string why; return enterSandbox(paths, why) > 0; }, act);
}

int opened(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

class WorkerSandbox : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    abi_ = landlockAbi(why);
    if (abi_ == 0) GTEST_SKIP() << why;
    char made[] = "/tmp/gpool-sandbox-XXXXXX";
    ASSERT_NE(::mkdtemp(made), nullptr);
    dir_ = made;
    fs::create_directories(dir_ / "modules");
    fs::create_directories(dir_ / "jit" / "alice");
    fs::create_directories(dir_ / "jit" / "bob");
    std::ofstream(dir_ / "secret") << "the server's key";
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  SandboxPaths paths() const { return workerPaths((dir_ / "modules").string(), (dir_ / "jit" / "alice").string(), {}); }

  int abi_ = 0;
  fs::path dir_;
};

TEST_F(WorkerSandbox, ItReadsTheSystemAndWritesItsModuleCacheOnly) {
  EXPECT_EQ(inSandbox(paths(), [] { return opened("/etc/ld.so.cache", O_RDONLY); }), 0);
  EXPECT_EQ(inSandbox(paths(), [] { return opened("/dev/null", O_RDWR); }), 0);
  EXPECT_EQ(inSandbox(paths(), [&] { return opened((dir_ / "modules" / "image").string(), O_CREAT | O_WRONLY); }), 0);
  // Outside what it was given: not the server's key beside its cache, nor a file it would make there.
  EXPECT_EQ(inSandbox(paths(), [&] { return opened((dir_ / "secret").string(), O_RDONLY); }), EACCES);
  EXPECT_EQ(inSandbox(paths(), [&] { return opened((dir_ / "planted").string(), O_CREAT | O_WRONLY); }), EACCES);
  EXPECT_FALSE(fs::exists(dir_ / "planted"));
  // Nor /etc beyond what the loader and the driver read of it.
  if (fs::exists("/etc/hostname")) EXPECT_EQ(inSandbox(paths(), [] { return opened("/etc/hostname", O_RDONLY); }), EACCES);
  // Without the sandbox, the same child reads it (the test can fail).
  EXPECT_EQ(opened((dir_ / "secret").string(), O_RDONLY), 0);
}

// A worker of one of alice's leases keeps what the driver compiled in alice's JIT cache, and can neither
// plant an entry in bob's (which the driver would load in bob's program in place of compiling) nor read it.
TEST_F(WorkerSandbox, ItWritesItsLeasesUsersJitCacheAndNoOtherUsers) {
  EXPECT_EQ(inSandbox(paths(), [&] { return opened((dir_ / "jit" / "alice" / "entry").string(), O_CREAT | O_WRONLY); }), 0);
  EXPECT_EQ(inSandbox(paths(), [&] { return ::mkdir((dir_ / "jit" / "alice" / "ComputeCache").c_str(), 0700) == 0 ? 0 : errno; }), 0);
  if (abi_ >= 2)  // (a cache may write an entry in one of its directories and move it to another: Landlock ABI 2 lets it)
    EXPECT_EQ(inSandbox(paths(), [&] {
                return ::rename((dir_ / "jit" / "alice" / "entry").c_str(), (dir_ / "jit" / "alice" / "ComputeCache" / "entry").c_str()) == 0
                           ? 0 : errno;
              }),
              0);
  std::ofstream(dir_ / "jit" / "bob" / "entry") << "bob's compiled kernel";
  EXPECT_EQ(inSandbox(paths(), [&] { return opened((dir_ / "jit" / "bob" / "entry").string(), O_WRONLY); }), EACCES);
  EXPECT_EQ(inSandbox(paths(), [&] { return opened((dir_ / "jit" / "bob" / "planted").string(), O_CREAT | O_WRONLY); }), EACCES);
  EXPECT_EQ(inSandbox(paths(), [&] { return opened((dir_ / "jit" / "bob" / "entry").string(), O_RDONLY); }), EACCES);
  EXPECT_EQ(inSandbox(paths(), [&] { return ::rename((dir_ / "jit" / "bob").c_str(), (dir_ / "jit" / "alice" / "b").c_str()) == 0 ? 0 : errno; }),
            EACCES);  // (nor move bob's into its own)
  EXPECT_FALSE(fs::exists(dir_ / "jit" / "bob" / "planted"));
  EXPECT_EQ(opened((dir_ / "jit" / "bob" / "entry").string(), O_WRONLY), 0);  // (outside the sandbox: reached)
}

TEST_F(WorkerSandbox, ItOpensDevShmByNameButDoesNotListIt) {
  std::string name = "/dev/shm/gpool-sandbox-test-" + std::to_string(::getpid());
  EXPECT_EQ(inSandbox(paths(), [&] { return opened(name, O_CREAT | O_RDWR); }), 0);
  EXPECT_TRUE(fs::exists(name));
  EXPECT_EQ(inSandbox(paths(), [&] { return ::unlink(name.c_str()) == 0 ? 0 : errno; }), 0);
  EXPECT_EQ(inSandbox(paths(), [] { return opened("/dev/shm", O_RDONLY | O_DIRECTORY); }), EACCES);
}

TEST_F(WorkerSandbox, ItReachesNoProcessOutsideIt) {
  pid_t outside = ::fork();  // (another worker, or gpool-server)
  if (outside == 0) {
    ::pause();
    ::_exit(0);
  }
  std::string proc = "/proc/" + std::to_string(outside);
  EXPECT_EQ(inSandbox(paths(), [&] { return opened(proc + "/mem", O_RDONLY); }), EACCES);
  EXPECT_EQ(inSandbox(paths(), [&] { return ::ptrace(PTRACE_ATTACH, outside, nullptr, nullptr) == 0 ? 0 : errno; }), EPERM);
  EXPECT_EQ(inSandbox(paths(), [&] { return opened(proc + "/environ", O_RDONLY); }), EACCES);
  EXPECT_EQ(inSandbox(paths(), [&] { return opened(proc + "/cmdline", O_RDONLY); }), EACCES);  // (what anyone else reads)
  EXPECT_EQ(inSandbox(paths(), [] { return opened("/proc/cpuinfo", O_RDONLY); }), 0);  // (the kernel's own files)
  EXPECT_EQ(inSandbox(paths(), [] { return opened("/proc/self/status", O_RDONLY); }), 0);
  if (abi_ >= 6) EXPECT_EQ(inSandbox(paths(), [&] { return ::kill(outside, 0) == 0 ? 0 : errno; }), EPERM);
  // Its own, it still reaches (its threads' names, its own memory).
  EXPECT_EQ(inSandbox(paths(), [] { return opened("/proc/self/mem", O_RDONLY); }), 0);
  EXPECT_EQ(inSandbox(paths(), [] { return opened("/proc/thread-self/comm", O_WRONLY); }), 0);
  EXPECT_EQ(opened(proc + "/mem", O_RDONLY), 0);  // (outside the sandbox: reached)
  ::kill(outside, SIGKILL);
  ::waitpid(outside, nullptr, 0);
}

TEST_F(WorkerSandbox, ItStartsNoProcess) {
  // (before, a process it started was in the sandbox too, but outlived a server killed with kill -9:
  // no_new_processes_test.cpp)
  EXPECT_EQ(inSandbox(paths(), [] {
              pid_t c = ::fork();
              if (c == 0) ::_exit(0);
              if (c > 0) ::waitpid(c, nullptr, 0);
              return c > 0 ? 0 : errno;
            }),
            EPERM);
}

// A thread that ran before the sandbox was entered (on a GPU, one NVIDIA's driver started while the worker
// opened the device): shut in too from Landlock ABI 8 (Linux 7.0, LANDLOCK_RESTRICT_SELF_TSYNC); before it,
// outside the rules, which is why a worker starts its own threads once in (and warns of any other).
TEST_F(WorkerSandbox, AThreadStartedBeforeIsShutInFromAbi8) {
  auto secret = (dir_ / "secret").string();
  int before[2], after[2];
  ASSERT_EQ(::pipe(before), 0);
  ASSERT_EQ(::pipe(after), 0);
  int said = inChild(
      [&] {
        std::thread([&] {  // waits for the sandbox, then opens what it refuses
          char go;
          if (::read(before[0], &go, 1) != 1) return;
          int e = opened(secret, O_RDONLY);
          if (::write(after[1], &e, sizeof e) != sizeof e) return;
        }).detach();
        std::string why;
        return enterSandbox(paths(), why) > 0 && ::write(before[1], "g", 1) == 1;
      },
      [&] {
        int e = -3;
        return ::read(after[0], &e, sizeof e) == sizeof e ? e : -3;
      });
  for (int fd : {before[0], before[1], after[0], after[1]}) ::close(fd);
  EXPECT_EQ(said, abi_ >= 8 ? EACCES : 0) << "Landlock ABI " << abi_;
}

}  // namespace
}  // namespace gpool::worker
