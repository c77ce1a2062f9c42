// Idle leases (allocator/src/idle_leases.cpp): a pool's idle_timeout ends a granted lease on whose GPUs
// no kernel ran for that long, by its servers' counts; kernels on any of its servers keep it.
#include <gtest/gtest.h>

#include "scheduler_fixtures.h"

using namespace gpool::allocator;
using namespace gpool::allocator::fixtures;

namespace {

constexpr const char* kPolicy = "[settings]\nlease_ttl = \"720h\"\nserver_timeout = \"720h\"\n"
                                "[pools.default]\nservers = [\"a\", \"b\"]\nidle_timeout = \"30m\"\n"
                                "[pools.batch]\nservers = [\"c\"]\n";
constexpr int64_t kMin = 60'000;

}  // namespace

TEST(IdleLeases, ALeaseOnWhoseGpusNoKernelRanForTheTimeoutEnds) {
  Scheduler s = make(kPolicy);
  s.registerServer(server("a", 1), 0);
  ASSERT_EQ(s.request(req("u"), 0, "L1").kind, Decision::kGranted);
  s.request(req("v"), 0, "L2");  // waits for the GPU
  s.tick(30 * kMin - 1);
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kGranted);
  s.tick(30 * kMin);
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kEnded);
  EXPECT_EQ(s.lease("L1")->end_reason, "reclaimed: no kernel ran on its GPUs for 30m (pool 'default' idle_timeout)");
  EXPECT_EQ(s.lease("L2")->state, LeaseState::kGranted);  // the GPU went on at once
  EXPECT_EQ(s.reclaimedIdle(), 1u);
}

TEST(IdleLeases, KernelsOnAnyOfItsServersKeepALeaseAndACountThatStandsStillDoesNot) {
  Scheduler s = make(kPolicy);
  s.registerServer(server("a", 1), 0);
  s.registerServer(server("b", 1), 0);
  ASSERT_EQ(s.request(req("u", 1.0, 2), 0, "L1").kind, Decision::kGranted);  // one GPU on each
  EXPECT_TRUE(s.reportLaunches("a", "L1", 500, 10 * kMin));
  EXPECT_TRUE(s.reportLaunches("b", "L1", 0, 10 * kMin));
  s.tick(39 * kMin);
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kGranted);  // active at 10 min
  s.reportLaunches("a", "L1", 500, 35 * kMin);  // the same count: nothing ran
  s.reportLaunches("b", "L1", 7, 35 * kMin);    // but on b it did
  s.tick(64 * kMin);
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kGranted);
  s.reportLaunches("a", "L1", 500, 60 * kMin);
  s.reportLaunches("b", "L1", 7, 60 * kMin);
  s.tick(65 * kMin);
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kEnded);
}

TEST(IdleLeases, ACountThatStartsAgainThenRisesIsActivity) {
  Scheduler s = make(kPolicy);
  s.registerServer(server("a", 1), 0);
  s.request(req("u"), 0, "L1");
  s.reportLaunches("a", "L1", 900, 1 * kMin);
  s.reportLaunches("a", "L1", 0, 20 * kMin);  // a count that fell (the server started again): not activity
  s.reportLaunches("a", "L1", 3, 25 * kMin);  // then it rose
  s.tick(54 * kMin);
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kGranted);
  s.tick(55 * kMin);
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kEnded);
}

TEST(IdleLeases, APoolWithoutTimeoutAndAStalledAllocatorReclaimNothing) {
  Scheduler s = make(kPolicy);
  s.registerServer(server("a", 1), 0);
  s.registerServer(server("c", 1), 0);
  LeaseRequest batch = req("u");
  batch.pool = "batch";
  s.request(batch, 0, "L1");
  s.request(req("u"), 0, "L2");
  s.forgive(20 * kMin);  // the allocator could not run for 20 min: that is not the lease's idleness
  s.tick(45 * kMin);
  EXPECT_EQ(s.lease("L2")->state, LeaseState::kGranted);
  s.tick(50 * kMin);
  EXPECT_EQ(s.lease("L2")->state, LeaseState::kEnded);
  s.tick(1000 * kMin);
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kGranted);  // batch has no idle_timeout
}

TEST(IdleLeases, APolicyMayGiveAPoolAnIdleTimeoutOfASecondOrMore) {
  EXPECT_EQ(policyError("[pools.default]\nidle_timeout = \"30m\"\n"), "accepted");
  EXPECT_EQ(policyError("[pools.default]\nidle_timeout = \"0s\"\n"), "accepted");
  EXPECT_NE(policyError("[pools.default]\nidle_timeout = \"500ms\"\n"), "accepted");
  EXPECT_NE(policyError("[pools.default]\nidle_timeout = \"soon\"\n"), "accepted");
}
