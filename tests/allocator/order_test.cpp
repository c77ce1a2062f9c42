// The order of a pool's queued requests within a priority class (issue 15, policy.h Order): first come
// first served, shortest first by estimates, least attained service first.
#include <gtest/gtest.h>

#include "scheduler_fixtures.h"

using namespace gpool::allocator;
using namespace gpool::allocator::fixtures;

namespace {

LeaseRequest job(const std::string& user, const std::string& id, double estimate_s = 0) {
  LeaseRequest r = req(user);
  r.job = id;
  r.estimate_s = estimate_s;
  return r;
}

}  // namespace

TEST(Order, ShortestFirstGrantsTheShortestEstimateNextAndUnknownLast) {
  Scheduler s = make("[pools.default]\norder = \"shortest-first\"\n");
  s.registerServer(server("a", 1), 0);
  ASSERT_EQ(s.request(job("u", "running", 100), 0, "R").kind, Decision::kGranted);
  ASSERT_EQ(s.request(job("u", "long", 5000), 1, "L").kind, Decision::kQueued);
  ASSERT_EQ(s.request(job("u", "unknown"), 2, "U").kind, Decision::kQueued);
  ASSERT_EQ(s.request(job("u", "short", 60), 3, "S").kind, Decision::kQueued);
  EXPECT_EQ(s.position("S"), 1);
  EXPECT_EQ(s.position("L"), 2);
  EXPECT_EQ(s.position("U"), 3);
  EXPECT_TRUE(s.end("R", "released", 4));
  EXPECT_EQ(s.lease("S")->state, LeaseState::kGranted);
  EXPECT_TRUE(s.end("S", "released", 5));
  EXPECT_EQ(s.lease("L")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("U")->state, LeaseState::kQueued);
}

TEST(Order, AShortRequestIsNotGrantedPastALongerOneInAFifoPool) {
  Scheduler s = make("");
  s.registerServer(server("a", 1), 0);
  ASSERT_EQ(s.request(job("u", "running", 100), 0, "R").kind, Decision::kGranted);
  ASSERT_EQ(s.request(job("u", "long", 5000), 1, "L").kind, Decision::kQueued);
  ASSERT_EQ(s.request(job("u", "short", 60), 2, "S").kind, Decision::kQueued);
  EXPECT_TRUE(s.end("R", "released", 3));
  EXPECT_EQ(s.lease("L")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("S")->state, LeaseState::kQueued);
}

TEST(Order, LeastAttainedServiceGrantsTheJobThatHadLeastFirst) {
  Scheduler s = make("[pools.default]\norder = \"least-attained\"\n[settings]\nlease_ttl = \"100h\"\nserver_timeout = \"100h\"\n");
  s.registerServer(server("a", 1), 0);
  ASSERT_EQ(s.request(job("u", "veteran"), 0, "V1").kind, Decision::kGranted);
  ASSERT_TRUE(s.end("V1", "preempted", 3600 * 1000));  // it had an hour of a GPU
  ASSERT_EQ(s.request(job("u", "other"), 3600 * 1000, "O").kind, Decision::kGranted);
  ASSERT_EQ(s.request(job("u", "veteran"), 3600 * 1000 + 1, "V2").kind, Decision::kQueued);  // requeued: first in time
  ASSERT_EQ(s.request(job("u", "newcomer"), 3600 * 1000 + 2, "N").kind, Decision::kQueued);
  ASSERT_EQ(s.request(job("w", "veteran"), 3600 * 1000 + 3, "W").kind, Decision::kQueued);  // another user's job of that name
  EXPECT_EQ(s.position("N"), 1);
  EXPECT_EQ(s.position("W"), 2);
  EXPECT_EQ(s.position("V2"), 3);
  EXPECT_TRUE(s.end("O", "released", 3600 * 1000 + 4));
  EXPECT_EQ(s.lease("N")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("V2")->state, LeaseState::kQueued);
  EXPECT_NE(policyError("[pools.default]\norder = \"random\"\n").find("pools.default.order must be one of fifo, shortest-first, least-attained, max-min (not 'random')"), std::string::npos);
}
