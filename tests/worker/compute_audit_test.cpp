// Each lease's device time as the driver counts it, checked by gpool-server (server/src/compute_audit.h):
// how far ahead of its share a lease below a whole GPU is on each device, and which leases are past the
// limit (or past half of it, once); and the sim's reading of that time, and which of NVML's devices is
// which of the server's (device_use.h).
#include "compute_audit.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device_use.h"
#include "shared_budget.h"

namespace gpool::server {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr pid_t kWorker = 4'100'001, kOther = 4'100'002;  // (workers are known by pid: no /proc needed)

// A lease whose workers serve its `shares` shares in turn, each `fraction` of a GPU; share i on device
// i % devices.
ComputeAudit::Lease lease(const std::string& id, std::vector<pid_t> workers, double fraction, int shares = 1, int devices = 1) {
  ComputeAudit::Lease l{id, std::move(workers), {}, std::nullopt};
  for (size_t i = 0; i < l.workers.size(); ++i) {
    int share = static_cast<int>(i) % shares;
    l.shares.push_back({share, fraction, share % devices});
  }
  return l;
}

// One audit of a second in which `busy` took the given time.
std::vector<ComputeAudit::Finding> second(ComputeAudit& audit, const std::vector<ComputeAudit::Lease>& leases,
                                          const ProcessBusy& busy) {
  return audit.audit(busy, kSecond, leases);
}

TEST(ComputeAudit, ALeaseAtItsShareIsLetBe) {
  ComputeAudit audit(10 * kSecond);
  std::vector<ComputeAudit::Lease> leases = {lease("L1", {kWorker}, 0.5)};
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(second(audit, leases, {{{0, kWorker}, kSecond / 2}}).empty()) << i;
  EXPECT_EQ(audit.ahead().at("L1"), 0);
}

TEST(ComputeAudit, ALeaseTakingTheWholeGpuIsNamedAtHalfTheLimitThenEndedPastIt) {
  ComputeAudit audit(10 * kSecond);
  std::vector<ComputeAudit::Lease> leases = {lease("L1", {kWorker, kOther}, 0.5), lease("L2", {kOther + 1}, 0.5)};
  ProcessBusy busy = {{{0, kWorker}, kSecond}, {{0, kOther + 1}, kSecond / 2}};  // L1 all of the GPU's time, L2 its half
  std::vector<int> named, ended;
  for (int i = 1; i <= 30 && ended.empty(); ++i)
    for (const auto& f : second(audit, leases, busy)) {
      EXPECT_EQ(f.lease, "L1");
      EXPECT_EQ(f.device, 0);
      EXPECT_DOUBLE_EQ(f.fraction, 0.5);
      (f.over ? ended : named).push_back(i);
      if (f.over) {
        EXPECT_EQ(f.ahead_ns, 21 * kSecond / 2);
        EXPECT_EQ(f.processes, (std::vector<pid_t>{kWorker, kOther}));  // the one that took it, and its lease's workers
      }
    }
  EXPECT_EQ(named, std::vector<int>{11});  // 5.5 s ahead: once
  EXPECT_EQ(ended, std::vector<int>{21});  // 10.5 s ahead
  EXPECT_EQ(audit.ahead().count("L1"), 0u) << "ended: it starts anew";
  EXPECT_EQ(audit.ahead().at("L2"), 0);
}

TEST(ComputeAudit, OneKernelLongerThanTheLimitAllowsIsEnded) {
  // A quarter of the GPU, and one kernel that keeps it busy: 0.75 s ahead for each second it runs.
  ComputeAudit audit(10 * kSecond);
  std::vector<ComputeAudit::Lease> leases = {lease("L1", {kWorker}, 0.25)};
  int ended = 0;
  for (int i = 1; i <= 20 && !ended; ++i)
    for (const auto& f : second(audit, leases, {{{0, kWorker}, kSecond}}))
      if (f.over) ended = i;
  EXPECT_EQ(ended, 14);  // 10.5 s ahead
}

TEST(ComputeAudit, AnIdleLeasePaysBackAtItsShare) {
  ComputeAudit audit(10 * kSecond);
  std::vector<ComputeAudit::Lease> leases = {lease("L1", {kWorker}, 0.5)};
  for (int i = 0; i < 8; ++i) second(audit, leases, {{{0, kWorker}, kSecond}});
  EXPECT_EQ(audit.ahead().at("L1"), 4 * kSecond);
  for (int i = 0; i < 4; ++i) second(audit, leases, {});
  EXPECT_EQ(audit.ahead().at("L1"), 2 * kSecond);
  for (int i = 0; i < 10; ++i) second(audit, leases, {});
  EXPECT_EQ(audit.ahead().at("L1"), 0);
  // Paid back: the next time it goes ahead, it starts from nothing, and past half the limit is said again.
  std::vector<int> named;
  for (int i = 1; i <= 12; ++i)
    for (const auto& f : second(audit, leases, {{{0, kWorker}, kSecond}})) named.push_back(f.over ? -i : i);
  EXPECT_EQ(named, std::vector<int>{11});
}

TEST(ComputeAudit, AWholeGpuIsNotAudited) {
  ComputeAudit audit(kSecond);
  // One share of a whole GPU; and two halves of one lease on the same GPU, which make a whole one.
  std::vector<ComputeAudit::Lease> leases = {lease("L1", {kWorker}, 1), lease("L2", {kOther, kOther + 1}, 0.5, 2)};
  for (int i = 0; i < 10; ++i)
    EXPECT_TRUE(second(audit, leases, {{{0, kWorker}, kSecond}, {{0, kOther}, kSecond}, {{0, kOther + 1}, kSecond}}).empty());
  EXPECT_TRUE(audit.ahead().empty());
}

TEST(ComputeAudit, EachDeviceIsAuditedApart) {
  // A lease with half of device 0 and half of device 1 takes all of device 0: the idle half elsewhere does not
  // make up for it.
  ComputeAudit audit(2 * kSecond);
  std::vector<ComputeAudit::Lease> leases = {lease("L1", {kWorker, kOther}, 0.5, 2, 2)};
  int ended = 0;
  for (int i = 1; i <= 10 && !ended; ++i)
    for (const auto& f : second(audit, leases, {{{0, kWorker}, kSecond}}))
      if (f.over) {
        ended = i;
        EXPECT_EQ(f.device, 0);
      }
  EXPECT_EQ(ended, 5);
}

TEST(ComputeAudit, TimeOnADeviceWhereNoWorkerOfTheLeaseIsIsAllAhead) {
  // A process its worker started (taken over) uses another GPU of the host, where none of the lease's workers
  // has a context: the lease has no share there.
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ComputeAudit audit(2 * kSecond);
  std::vector<ComputeAudit::Lease> leases = {lease("L1", {::getpid()}, 0.5)};
  auto found = [&] { return second(audit, leases, {{{1, child}, kSecond}}); };
  found();
  found();
  auto f = found();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_TRUE(f[0].over);
  EXPECT_EQ(f[0].device, 1);
  EXPECT_EQ(f[0].ahead_ns, 3 * kSecond);
  EXPECT_EQ(f[0].processes, (std::vector<pid_t>{child, ::getpid()}));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST(ComputeAudit, AWorkersOwnContextOnAnotherGpuBringsNoShareThere) {
  // A worker taken over makes a context on a second GPU of the host, besides its own, and keeps that one busy:
  // its lease's share is on device 0 only, so all of its time on device 1 is ahead (before, a context placed
  // the lease's share wherever its worker made one).
  ComputeAudit audit(2 * kSecond);
  std::vector<ComputeAudit::Lease> leases = {lease("L1", {kWorker}, 0.5)};
  std::vector<int> ended;
  for (int i = 1; i <= 5 && ended.empty(); ++i)
    for (const auto& f : second(audit, leases, {{{0, kWorker}, kSecond / 2}, {{1, kWorker}, kSecond}}))
      if (f.over) {
        ended.push_back(i);
        EXPECT_EQ(f.device, 1);
        EXPECT_EQ(f.fraction, 0);
        EXPECT_EQ(f.processes, std::vector<pid_t>{kWorker});
      }
  EXPECT_EQ(ended, std::vector<int>{3});
  // On a GPU the server does not serve (numbered below 0), alike.
  ComputeAudit unserved(2 * kSecond);
  int over = 0;
  for (int i = 1; i <= 3; ++i)
    for (const auto& f : second(unserved, leases, {{{-1 - 2, kWorker}, kSecond}})) over += f.over ? i : 0;
  EXPECT_EQ(over, 3);
}

TEST(ComputeAudit, WhatAWorkersChildTakesIsItsLeases) {
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ComputeAudit audit(kSecond);
  std::vector<ComputeAudit::Lease> leases = {lease("L1", {::getpid()}, 0.5)};
  ProcessBusy busy = {{{0, ::getpid()}, kSecond / 2}, {{0, child}, kSecond / 2}, {{0, 1}, kSecond}};  // (1: init, no lease's)
  std::vector<ComputeAudit::Finding> f;
  for (int i = 0; i < 5 && f.empty(); ++i) f = second(audit, leases, busy);
  ASSERT_EQ(f.size(), 1u);  // past half of 1 s: 0.5 s a second
  EXPECT_EQ(f[0].ahead_ns, kSecond / 2 * 2);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST(ComputeAudit, ALeaseGoneIsForgotten) {
  ComputeAudit audit(10 * kSecond);
  second(audit, {lease("L1", {kWorker}, 0.5)}, {{{0, kWorker}, kSecond}});
  EXPECT_EQ(audit.ahead().at("L1"), kSecond / 2);
  second(audit, {}, {});
  EXPECT_TRUE(audit.ahead().empty());
}

TEST(ComputeAudit, AnAbsurdCountIsHeldNotWrapped) {
  // On sim, a worker taken over can write its own slot of the device's page: the largest counts there are
  // held at the most a count can be, never wrapped round to a small one (nor overflowed: UB).
  ComputeAudit audit(10 * kSecond);
  std::vector<ComputeAudit::Lease> leases = {lease("L1", {kWorker, kOther}, 0.5)};
  auto f = second(audit, leases, {{{0, kWorker}, INT64_MAX}, {{0, kOther}, INT64_MAX}});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_TRUE(f[0].over);
  EXPECT_EQ(f[0].ahead_ns, INT64_MAX - kSecond / 2);
}

TEST(SimDeviceUse, WhatEachWorkerTookSinceTheLastRead) {
  auto memory = budget::SharedBudget::create(1 << 30), busy = budget::SharedBudget::create(UINT64_MAX);
  SimDeviceUse sim(memory, busy);
  std::vector<SimDeviceUse::Worker> workers = {{kWorker, 0, 0}, {kOther, 3, 1}};
  memory->reserve(3, 4096);
  busy->add(0, 700), busy->add(3, 50);
  DeviceUse use = sim.read(workers);
  EXPECT_EQ(use.memory.at(kOther), 4096u);
  ASSERT_TRUE(use.busy);
  EXPECT_EQ(*use.busy, (ProcessBusy{{{0, kWorker}, 700}, {{1, kOther}, 50}}));
  busy->add(0, 300);
  EXPECT_EQ(*sim.read(workers).busy, (ProcessBusy{{{0, kWorker}, 300}}));
  // The worker in slot 0 ended, its slot counted anew (gpool-server reclaims it), and a new one took it.
  busy->reclaim(0);
  busy->add(0, 20);
  workers[0].pid = kWorker + 10;
  EXPECT_EQ(*sim.read(workers).busy, (ProcessBusy{{{0, kWorker + 10}, 20}}));
  EXPECT_GT(sim.read(workers).elapsed_ns, 0);
  busy->add(3, UINT64_MAX - 100);  // (a worker taken over, writing its own slot)
  EXPECT_EQ(*sim.read(workers).busy, (ProcessBusy{{{1, kOther}, INT64_MAX}}));
}

TEST(DeviceUse, NvmlsDevicesAreNumberedAsTheServerNumbersThem) {
  std::string why;
  // PCI order (NVML) against fastest first, and CUDA_VISIBLE_DEVICES=2,0 (the server): the third of NVML's
  // GPUs is the server's 0, the second is not the server's.
  auto numbers = serverNumbers({"GPU-a", "GPU-b", "GPU-c"}, {"GPU-c", "GPU-a"}, why);
  ASSERT_TRUE(numbers) << why;
  EXPECT_EQ(*numbers, (std::vector<int>{1, -2, 0}));
  // A server without an allocator lists none: NVML's order.
  EXPECT_EQ(serverNumbers({"GPU-a", "GPU-b"}, {}, why), (std::vector<int>{0, 1}));
  // A GPU of the server's that NVML does not show: no numbers (its time would be counted to the wrong GPU).
  EXPECT_FALSE(serverNumbers({"GPU-a"}, {"MIG-x"}, why));
  EXPECT_NE(why.find("MIG instance"), std::string::npos) << why;
  EXPECT_FALSE(serverNumbers({"GPU-a"}, {"GPU-a", "GPU-z"}, why));
  EXPECT_NE(why.find("device 1 (GPU-z)"), std::string::npos) << why;
}

TEST(DeviceUse, APidNamespaceOfItsOwnIsToldFromTheHosts) {
  if (!inHostPidNamespace()) GTEST_SKIP() << "this test runs in a pid namespace of its own already";
  if (::geteuid() != 0) GTEST_SKIP() << "a pid namespace of its own needs root";
  int told[2];
  ASSERT_EQ(::pipe(told), 0);
  pid_t outer = ::fork();
  if (outer == 0) {  // (unshare: the next child is the first process of a new pid namespace)
    if (::unshare(CLONE_NEWPID) != 0) ::_exit(2);
    pid_t inner = ::fork();
    if (inner == 0) {
      char said = inHostPidNamespace() ? 'h' : 'o';
      ::_exit(::write(told[1], &said, 1) == 1 ? 0 : 1);
    }
    int status = 0;
    ::waitpid(inner, &status, 0);
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
  }
  int status = 0;
  ::waitpid(outer, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "the kernel refused a new pid namespace here";
  char said = 0;
  ASSERT_EQ(::read(told[0], &said, 1), 1);
  EXPECT_EQ(said, 'o');
  ::close(told[0]), ::close(told[1]);
}

}  // namespace
}  // namespace gpool::server
