// Each lease's device memory as the driver counts it, checked by gpool-server (server/src/memory_audit.h):
// whose a process's memory is (a worker's, its descendants', its lease's uid's), and which leases hold more
// than their cap and their workers' contexts, at two audits running. Real processes, read from /proc.
#include "memory_audit.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpool::server {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// A child of this process that waits until killed (as `uid`, when given).
pid_t child(std::optional<uid_t> uid = std::nullopt) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (uid && (::setresgid(*uid, *uid, *uid) != 0 || ::setresuid(*uid, *uid, *uid) != 0)) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  return pid;
}

void end(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

TEST(MemoryAudit, ALeasePastItsCapAndContextsAtTwoAuditsRunningIsNamed) {
  MemoryAudit audit(500 * kMiB);  // each worker's context may take 500 MiB
  std::vector<MemoryAudit::Lease> leases = {{"L1", 1024 * kMiB, {::getpid()}, std::nullopt}};
  ProcessMemory held = {{::getpid(), 1600 * kMiB}};  // past 1,024 + 500
  EXPECT_TRUE(audit.audit(held, leases).empty());   // once: let be
  auto overruns = audit.audit(held, leases);
  ASSERT_EQ(overruns.size(), 1u);
  EXPECT_EQ(overruns[0].lease, "L1");
  EXPECT_EQ(overruns[0].used, 1600 * kMiB);
  EXPECT_EQ(overruns[0].allowed, 1524 * kMiB);
  EXPECT_EQ(overruns[0].processes, std::vector<pid_t>{::getpid()});
}

TEST(MemoryAudit, ALeaseWithinItsCapAndContextsIsLetBe) {
  MemoryAudit audit(500 * kMiB);
  pid_t other = child();
  // Two workers: 1,024 of cap and 500 for each context.
  std::vector<MemoryAudit::Lease> leases = {{"L1", 1024 * kMiB, {::getpid(), other}, std::nullopt}};
  ProcessMemory held = {{::getpid(), 1000 * kMiB}, {other, 1000 * kMiB}};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(audit.audit(held, leases).empty());
  held[other] = 1100 * kMiB;  // 2,100 of 2,024
  audit.audit(held, leases);
  EXPECT_EQ(audit.audit(held, leases).size(), 1u);
  end(other);
}

TEST(MemoryAudit, OncePastThenBackWithinIsNotAnOverrun) {
  MemoryAudit audit(0);
  std::vector<MemoryAudit::Lease> leases = {{"L1", 100 * kMiB, {::getpid()}, std::nullopt}};
  EXPECT_TRUE(audit.audit({{::getpid(), 200 * kMiB}}, leases).empty());
  EXPECT_TRUE(audit.audit({{::getpid(), 50 * kMiB}}, leases).empty());
  EXPECT_TRUE(audit.audit({{::getpid(), 200 * kMiB}}, leases).empty());
}

TEST(MemoryAudit, WhatAWorkersChildHoldsIsItsLeases) {
  // A worker taken over could start a process of its own that uses the GPU beside it.
  pid_t worker_child = child();
  std::vector<MemoryAudit::Lease> leases = {{"L1", 100 * kMiB, {::getpid()}, std::nullopt},
                                            {"L2", 100 * kMiB, {static_cast<pid_t>(::getppid())}, std::nullopt}};
  EXPECT_EQ(MemoryAudit::ownerOf(worker_child, leases), 0u);
  MemoryAudit audit(0);
  ProcessMemory held = {{::getpid(), 60 * kMiB}, {worker_child, 60 * kMiB}};
  audit.audit(held, leases);
  auto overruns = audit.audit(held, leases);
  ASSERT_EQ(overruns.size(), 1u);
  EXPECT_EQ(overruns[0].lease, "L1");
  EXPECT_EQ(overruns[0].used, 120 * kMiB);
  EXPECT_EQ(overruns[0].processes.size(), 2u);
  end(worker_child);
}

TEST(MemoryAudit, WhatAProcessOfALeasesUidHoldsIsThatLeases) {
  if (::geteuid() != 0) GTEST_SKIP() << "starting a process as another uid needs root";
  constexpr uid_t kUid = 61201;  // (the lease's user under --worker-uids)
  pid_t stray = child(kUid);     // not a worker's descendant: left running, or started by another route
  for (int i = 0; i < 100; ++i) {  // (until it is that user)
    MemoryAudit::Lease probe{"L1", 1, {}, kUid};
    if (MemoryAudit::ownerOf(stray, {probe})) break;
    ::usleep(10000);
  }
  std::vector<MemoryAudit::Lease> leases = {{"L0", 100 * kMiB, {}, 61200}, {"L1", 100 * kMiB, {}, kUid}};
  EXPECT_EQ(MemoryAudit::ownerOf(stray, leases), 1u);
  leases[1].uid.reset();  // without --worker-uids, it is nobody's
  EXPECT_EQ(MemoryAudit::ownerOf(stray, leases), std::nullopt);
  end(stray);
}

TEST(MemoryAudit, AProcessOfNoLeaseAndALeaseWithoutACapAreLetBe) {
  MemoryAudit audit(0);
  std::vector<MemoryAudit::Lease> leases = {{"L1", 0, {::getpid()}, std::nullopt}};  // (no cap: the whole GPU)
  ProcessMemory held = {{::getpid(), 80ull << 30}, {1, 80ull << 30}};  // (1: init, no lease's)
  EXPECT_EQ(MemoryAudit::ownerOf(1, leases), std::nullopt);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(audit.audit(held, leases).empty());
}

TEST(MemoryAudit, AbsurdCountsAreHeldNotWrappedRoundBelowTheCap) {
  // Two processes of a lease whose counts (a worker taken over can write its own, on sim) add up past 2**64:
  // the sum is held at its most, not wrapped round to 1 MiB.
  pid_t other = child();
  MemoryAudit audit(0);
  std::vector<MemoryAudit::Lease> leases = {{"L1", 100 * kMiB, {::getpid(), other}, std::nullopt}};
  ProcessMemory held = {{::getpid(), UINT64_MAX - kMiB + 1}, {other, 2 * kMiB}};
  audit.audit(held, leases);
  auto overruns = audit.audit(held, leases);
  ASSERT_EQ(overruns.size(), 1u);
  EXPECT_EQ(overruns[0].used, UINT64_MAX);
  end(other);
}

TEST(MemoryAudit, NvmlIsOpenedOnlyWhereTheDriversLibraryIs) {
  std::string why;
  auto nvml = NvmlDeviceUse::open({}, why);  // (no UUIDs: NVML's order)
  if (!nvml) {
    EXPECT_NE(why.find("libnvidia-ml.so.1"), std::string::npos) << why;
    GTEST_SKIP() << "no NVIDIA driver here: " << why;
  }
  auto use = nvml->read(why);
  ASSERT_TRUE(use.has_value()) << why;
  EXPECT_TRUE(use->busy.has_value()) << use->busy_why;
}

}  // namespace
}  // namespace gpool::server
