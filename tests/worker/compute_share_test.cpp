// A lease's compute share (server/worker/compute_share.h) on a virtual clock: a fake device runs each
// launch for its given time, one after another, and the host's sleeps and waits move the clock.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <memory>

#include "compute_pace.h"
#include "compute_share.h"
#include "shared_budget.h"

using gpool::budget::ComputePace;
using gpool::worker::ComputeShare;
using gpool::worker::LaunchTimer;

namespace {

constexpr int64_t kMs = 1'000'000;

// One device and the host's clock; each worker's timer (below) queues its launches on it.
struct FakeDevice {
  int64_t now = 1000 * kMs;  // CLOCK_MONOTONIC ns, as a host long up
  int64_t free_at = 0;       // when the device finishes what it was given
  int64_t busy = 0;          // device time of all launches given
  int64_t run(int64_t ns) {  // a launch given now: when it ends
    free_at = std::max(free_at, now) + ns;
    busy += ns;
    return free_at;
  }
};

class FakeTimer : public LaunchTimer {
 public:
  FakeTimer(FakeDevice& d, int64_t kernel_ns) : d_(d), kernel_ns_(kernel_ns) {}
  void startTiming(uint64_t) override { max_running_ = std::max(max_running_, ends_.size()); }
  void stopTiming(uint64_t) override { ends_.push_back({d_.run(kernel_ns_), kernel_ns_}); }
  Finished takeFinished(bool wait_oldest) override {
    if (wait_oldest && !ends_.empty()) d_.now = std::max(d_.now, ends_.front().first);
    Finished f;
    while (!ends_.empty() && ends_.front().first <= d_.now) {
      f.busy_ns += ends_.front().second;
      ++f.launches;
      ends_.pop_front();
    }
    f.running = ends_.size();
    return f;
  }
  size_t maxRunning() const { return max_running_; }
  int64_t kernel_ns_;

 private:
  FakeDevice& d_;
  std::deque<std::pair<int64_t, int64_t>> ends_;  // (end, device time) of launches not yet taken
  size_t max_running_ = 0;
};

ComputeShare share(double f, std::shared_ptr<ComputePace> pace, FakeTimer& t, FakeDevice& d) {
  return ComputeShare(f, std::move(pace), t, [&d] { return d.now; }, [&d](int64_t ns) { d.now += ns; });
}

// Launches (each costing the host 5 us) until the clock passes `until`.
void launchUntil(ComputeShare& s, FakeDevice& d, int64_t until) {
  while (d.now < until) {
    s.beforeLaunch(0);
    d.now += 5000;
    s.afterLaunch(0);
  }
}

}  // namespace

TEST(ComputeShare, AQuarterShareHoldsAKernelLoopToAQuarterOfTheDevice) {
  FakeDevice d;
  FakeTimer t(d, 1 * kMs);
  auto s = share(0.25, ComputePace::create(), t, d);
  const int64_t start = d.now;
  launchUntil(s, d, start + 10'000 * kMs);
  const double used = static_cast<double>(d.busy) / static_cast<double>(d.now - start);
  EXPECT_LE(used, 0.25 + 0.005);  // (what the 100 ms of idle credit lets through: 25 ms in 10 s)
  EXPECT_GE(used, 0.24);
  EXPECT_GT(s.pacedNs(), 7000 * kMs);  // it waited most of the time
}

// The pace counts, for gpool-server's /metrics, the device time every worker of the lease charged and the
// time they held launches back.
TEST(ComputeShare, ThePaceCountsTheLeasesDeviceTimeAndItsWaits) {
  FakeDevice d;
  FakeTimer a(d, 1 * kMs), b(d, 1 * kMs);
  auto pace = ComputePace::create();
  auto sa = share(0.25, pace, a, d), sb = share(0.25, pace, b, d);
  launchUntil(sa, d, d.now + 2000 * kMs);
  launchUntil(sb, d, d.now + 2000 * kMs);
  EXPECT_EQ(pace->busyNs(), sa.chargedNs() + sb.chargedNs());
  EXPECT_EQ(pace->waitedNs(), sa.pacedNs() + sb.pacedNs());
  EXPECT_GT(sb.pacedNs(), 0);
  EXPECT_GE(static_cast<double>(pace->busyNs()), 0.9 * static_cast<double>(d.busy));  // (what still runs is not charged yet)
}

TEST(ComputeShare, TheWorkersOfALeaseShareOnePace) {
  FakeDevice d;
  FakeTimer a(d, 2 * kMs), b(d, 1 * kMs);
  auto pace = ComputePace::create();
  auto sa = share(0.5, pace, a, d), sb = share(0.5, pace, b, d);
  const int64_t start = d.now;
  while (d.now < start + 10'000 * kMs) {  // two processes of one lease, launching in turn
    for (auto* s : {&sa, &sb}) {
      s->beforeLaunch(0);
      d.now += 5000;
      s->afterLaunch(0);
    }
  }
  const double used = static_cast<double>(d.busy) / static_cast<double>(d.now - start);
  EXPECT_LE(used, 0.5 + 0.01);
  EXPECT_GE(used, 0.45);
}

TEST(ComputeShare, OverAnySpanALeaseUsesAtMostItsShareOfTheSpanAndTheBurst) {
  FakeDevice d;
  FakeTimer t(d, 1 * kMs);
  auto s = share(0.5, ComputePace::create(), t, d);
  d.now += 60'000 * kMs;  // idle for a minute: it may then run at full speed, until the burst is spent
  const int64_t start = d.now, busy_before = d.busy;
  for (int n = 0; s.pacedNs() == 0 && n < 10'000; ++n) {  // (10 s of kernels: one never paced fails below)
    s.beforeLaunch(0);
    s.afterLaunch(0);
  }
  // At a share of 0.5 a span T allows 0.5 x (T + 100 ms): at full speed, T = 100 ms of device time.
  const int64_t used = d.busy - busy_before, span = d.now - start;
  EXPECT_LE(used, (span + ComputeShare::kBurstNs) / 2 + ComputeShare::kAheadNs);
  EXPECT_GE(used, ComputeShare::kBurstNs - 2 * kMs);
  EXPECT_GE(d.now - start, used);  // it ran at full speed: its kernels back to back
}

TEST(ComputeShare, LongKernelsAreNotQueuedAheadOfTheirMeasurement) {
  FakeDevice d;
  FakeTimer t(d, 100 * kMs);  // longer than what may run unmeasured: one at a time
  auto s = share(0.5, ComputePace::create(), t, d);
  launchUntil(s, d, d.now + 5000 * kMs);
  EXPECT_LE(t.maxRunning(), 1u);
  FakeTimer quick(d, 10'000);  // 10 us kernels: about 2 ms of them may queue (200)
  auto q = share(0.5, ComputePace::create(), quick, d);
  launchUntil(q, d, d.now + 1000 * kMs);
  EXPECT_GE(quick.maxRunning(), 100u);
  EXPECT_LE(quick.maxRunning(), 250u);
}

TEST(ComputePace, IsOneAcrossProcessesAndKeepsWhatADeadWorkerCharged) {
  auto server = ComputePace::create();
  pid_t child = ::fork();
  if (child == 0) {  // a worker charges 10 ms at a share of 0.25 and dies
    auto worker = ComputePace::adopt(::dup(server->fd()));
    worker->charge(10 * kMs, 0.25, 1000 * kMs, ComputeShare::kBurstNs);
    _exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(server->paidUntil(), 1000 * kMs - ComputeShare::kBurstNs + 40 * kMs);
  server->charge(10 * kMs, 0.25, 1000 * kMs, ComputeShare::kBurstNs);  // the lease's next worker adds to it
  EXPECT_EQ(server->paidUntil(), 1000 * kMs - ComputeShare::kBurstNs + 80 * kMs);
}

TEST(ComputePace, AMemoryBudgetIsNotAPaceNorTheReverse) {
  auto budget = gpool::budget::SharedBudget::create(100);
  EXPECT_THROW(ComputePace::adopt(::dup(budget->fd())), std::runtime_error);
  auto pace = ComputePace::create();
  EXPECT_THROW(gpool::budget::SharedBudget::adopt(::dup(pace->fd())), std::runtime_error);
}
