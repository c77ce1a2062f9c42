// Rounds (issue 15): max-min fairness and least attained service that re-decide every round which jobs
// run and on which GPU type, and the linear programs (time_shares.h) that divide the types' time.
#include <gtest/gtest.h>

#include <numeric>

#include "scheduler_fixtures.h"
#include "time_shares.h"

using namespace gpool::allocator;
using namespace gpool::allocator::fixtures;

namespace {

constexpr double kTol = 1e-6;

double sum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

}  // namespace

TEST(TimeShares, OneTypeIsSharedEqually) {
  auto x = maxMinShares({{1, {1}}, {1, {1}}, {1, {1}}}, {1});
  for (const auto& row : x) EXPECT_NEAR(row[0], 1.0 / 3, kTol);
  x = maxMinShares({{1, {1}}, {1, {1}}}, {4});  // room for both all the time
  for (const auto& row : x) EXPECT_NEAR(row[0], 1.0, kTol);
}

TEST(TimeShares, TheLeastNormalizedShareIsRaisedThenTheSumAndNoTypeGivesMoreThanItHas) {
  // Types (slow, fast), one GPU each. Job 1 runs alike on both: whatever the split, it has its equal
  // share's throughput, so the least share is 1; then the sum is largest with job 0 on the fast GPU.
  auto x = maxMinShares({{1, {1, 4}}, {1, {1, 1}}}, {1, 1});
  EXPECT_NEAR(x[0][1], 1.0, 1e-5);
  EXPECT_NEAR(x[1][0], 1.0, 1e-5);
  // Two jobs alike on two GPUs: each has its equal share (half of each, normalized throughput 1), where
  // putting job 0 on the fast GPU alone would give job 1 less (0.91) than its equal share.
  x = maxMinShares({{1, {1, 4}}, {1, {1, 1.2}}}, {1, 1});
  EXPECT_NEAR(x[0][1], 0.5, 1e-5);
  EXPECT_NEAR(x[1][1], 0.5, 1e-5);
  // Agnostic (every speed 1): equal time, whatever the types.
  x = maxMinShares({{1, {1, 1}}, {1, {1, 1}}, {1, {1, 1}}}, {1, 1});
  for (const auto& row : x) EXPECT_NEAR(sum(row), 2.0 / 3, 1e-5);
  // Half-GPU jobs on half a GPU of each type; job 0 cannot run on the first. Normalized against its own
  // equal share (half as large: it has half the types), it gets half the time the others get.
  x = maxMinShares({{0.5, {0, 1}}, {0.5, {1, 1}}, {0.5, {1, 1}}, {0.5, {1, 1}}}, {0.5, 0.5});
  EXPECT_NEAR(x[0][0], 0.0, kTol);
  EXPECT_NEAR(sum(x[0]), 2.0 / 7, 1e-5);
  for (size_t j = 1; j < 4; ++j) EXPECT_NEAR(sum(x[j]), 4.0 / 7, 1e-5);
  for (size_t t = 0; t < 2; ++t) {
    double used = 0;
    for (const auto& row : x) used += 0.5 * row[t];
    EXPECT_LE(used, 0.5 + kTol);
  }
}

TEST(TimeShares, FastestTypesRunsEveryJobThatFitsWhereTheSumIsLargest) {
  // Job 0 gains 4× on the fast type, job 1 gains 1.2×: the fast GPU goes to job 0.
  EXPECT_EQ(fastestTypes({{1, {1, 1.2}}, {1, {1, 4}}}, {1, 1}), (std::vector<int>{0, 1}));
  // No room for the third.
  auto to = fastestTypes({{1, {1, 2}}, {1, {1, 2}}, {1, {1, 2}}}, {1, 1});
  EXPECT_EQ(std::count(to.begin(), to.end(), -1), 1);
  EXPECT_EQ(std::count(to.begin(), to.end(), 0), 1);
}

namespace {

LeaseRequest job(const std::string& name, const std::string& kind = "", bool restartable = true) {
  LeaseRequest r = req("u");
  r.job = name;
  r.kind = kind;
  r.restartable = restartable;
  return r;
}

const char* kSettings = R"(
[settings]
preemption_grace = "10s"
lease_ttl = "100h"
server_timeout = "100h"
[job_kinds.cyclegan]
K80 = 0.5
V100 = 4.4
[job_kinds.lm]
K80 = 3.0
V100 = 3.3
)";

}  // namespace

TEST(Rounds, MaxMinTakesTurnsOnAGpuTooFewForItsJobs) {
  Scheduler s = make(std::string(kSettings) + "[pools.default]\norder = \"max-min\"\nround = \"1m\"\n");
  s.registerServer(server("a", 1), 0);
  ASSERT_EQ(s.request(job("A"), 0, "A1").kind, Decision::kGranted);
  ASSERT_EQ(s.request(job("B"), 0, "B1").kind, Decision::kQueued);
  s.tick(1000);  // the first round: both want half the time; B has had none, A all of it
  EXPECT_EQ(s.lease("A1")->preempt_at_ms, 11000);
  EXPECT_EQ(s.lease("A1")->preempted_for, "round: other jobs' turn in pool 'default' this round (max-min)");
  EXPECT_EQ(s.nextRound(), 61000);
  s.tick(11000);
  EXPECT_EQ(s.lease("A1")->state, LeaseState::kEnded);
  EXPECT_NE(s.lease("A1")->end_reason.find("preempted by its pool's round"), std::string::npos);
  EXPECT_EQ(s.lease("B1")->state, LeaseState::kGranted);
  EXPECT_EQ(s.rotated(), 1u);
  EXPECT_EQ(s.preempted(), 0u);
  ASSERT_EQ(s.request(job("A"), 11000, "A2").kind, Decision::kQueued);  // its launcher asks again
  s.tick(60999);
  EXPECT_EQ(s.lease("B1")->preempt_at_ms, 0);  // no round yet
  s.tick(61000);  // A has had 11 s of 60, B 50 s: A's turn
  EXPECT_GT(s.lease("B1")->preempt_at_ms, 0);
  s.tick(71000);
  EXPECT_EQ(s.lease("A2")->state, LeaseState::kGranted);
}

TEST(Rounds, JobsThatCannotRestartKeepTheirGpus) {
  Scheduler s = make(std::string(kSettings) + "[pools.default]\norder = \"max-min\"\nround = \"1m\"\n");
  s.registerServer(server("a", 1), 0);
  ASSERT_EQ(s.request(job("A", "", false), 0, "A1").kind, Decision::kGranted);
  ASSERT_EQ(s.request(job("B"), 0, "B1").kind, Decision::kQueued);
  for (int64_t t = 0; t <= 180000; t += 10000) s.tick(t);
  EXPECT_EQ(s.lease("A1")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("A1")->preempt_at_ms, 0);
  EXPECT_EQ(s.lease("B1")->state, LeaseState::kQueued);
}

TEST(Rounds, AwareRoundsSwapJobsToTheTypesThatRunThemFastest) {
  // cyclegan runs 8.8× faster on a V100, lm 1.1×. Both start where the other belongs.
  Scheduler s = make(std::string(kSettings) + "[pools.default]\norder = \"least-attained\"\nround = \"1m\"\n");
  s.registerServer(typed("k80s", 1, "Tesla K80"), 0);
  s.registerServer(typed("v100s", 1, "Tesla V100-SXM2-16GB"), 0);
  ASSERT_EQ(s.request(job("L", "lm"), 0, "L1").kind, Decision::kGranted);
  ASSERT_EQ(s.lease("L1")->shares[0].server, "v100s");  // its fastest type, free when it came
  ASSERT_EQ(s.request(job("C", "cyclegan"), 0, "C1").kind, Decision::kGranted);
  ASSERT_EQ(s.lease("C1")->shares[0].server, "k80s");
  s.tick(1000);
  EXPECT_EQ(s.lease("L1")->preempted_for, "round: it moves to K80 this round (least-attained)");
  EXPECT_EQ(s.lease("C1")->preempted_for, "round: it moves to V100 this round (least-attained)");
  s.tick(11000);
  // Their launchers ask again: each job goes where the round chose, though the V100 is lm's fastest.
  ASSERT_EQ(s.request(job("L", "lm"), 11000, "L2").kind, Decision::kGranted);
  EXPECT_EQ(s.lease("L2")->shares[0].server, "k80s");
  ASSERT_EQ(s.request(job("C", "cyclegan"), 11000, "C2").kind, Decision::kGranted);
  EXPECT_EQ(s.lease("C2")->shares[0].server, "v100s");
  s.tick(121000);  // where they are is where they belong: no more notices
  EXPECT_EQ(s.lease("C2")->preempt_at_ms, 0);
  EXPECT_EQ(s.lease("L2")->preempt_at_ms, 0);
}

TEST(Rounds, AgnosticRoundsLeaveJobsWhereTheyRun) {
  Scheduler s = make(std::string(kSettings) + "[pools.default]\norder = \"least-attained\"\nround = \"1m\"\nheterogeneity = \"agnostic\"\n");
  s.registerServer(typed("k80s", 1, "Tesla K80"), 0);
  s.registerServer(typed("v100s", 1, "Tesla V100-SXM2-16GB"), 0);
  ASSERT_EQ(s.request(job("C", "cyclegan"), 0, "C1").kind, Decision::kGranted);
  ASSERT_EQ(s.lease("C1")->shares[0].server, "k80s");  // alike to it: the first
  ASSERT_EQ(s.request(job("L", "lm"), 0, "L1").kind, Decision::kGranted);
  for (int64_t t = 0; t <= 180000; t += 10000) s.tick(t);
  EXPECT_EQ(s.lease("C1")->preempt_at_ms, 0);
  EXPECT_EQ(s.lease("L1")->preempt_at_ms, 0);
}

TEST(Rounds, LeastAttainedRunsTheJobsThatHadLeast) {
  Scheduler s = make(std::string(kSettings) + "[pools.default]\norder = \"least-attained\"\nround = \"1m\"\n");
  s.registerServer(server("a", 1), 0);
  ASSERT_EQ(s.request(job("A"), 0, "A1").kind, Decision::kGranted);
  s.tick(0);
  EXPECT_EQ(s.lease("A1")->preempt_at_ms, 0);  // alone: it runs on
  ASSERT_EQ(s.request(job("B"), 30000, "B1").kind, Decision::kQueued);
  s.tick(60000);  // A has had a minute, B nothing
  EXPECT_GT(s.lease("A1")->preempt_at_ms, 0);
  s.tick(70000);
  EXPECT_EQ(s.lease("B1")->state, LeaseState::kGranted);
  ASSERT_EQ(s.request(job("A"), 70000, "A2").kind, Decision::kQueued);
  s.tick(120000);  // B has had 50 s, A 70 s: B runs on
  EXPECT_EQ(s.lease("B1")->preempt_at_ms, 0);
  s.tick(180000);  // B 110 s: A's turn
  EXPECT_GT(s.lease("B1")->preempt_at_ms, 0);
}

// round_stay: B, running, keeps the GPU until its service, divided by round_stay, passes A's.
TEST(Rounds, ARunningJobKeepsItsPlaceUntilAnothersClaimIsRoundStayTimesStronger) {
  for (double stay : {1.0, 2.0}) {
    SCOPED_TRACE(stay);
    Scheduler s = make(std::string(kSettings) + "[pools.default]\norder = \"least-attained\"\nround = \"1m\"\nround_stay = " +
                       std::to_string(stay) + "\n");
    s.registerServer(server("a", 1), 0);
    ASSERT_EQ(s.request(job("A"), 0, "A1").kind, Decision::kGranted);
    ASSERT_EQ(s.request(job("B"), 30000, "B1").kind, Decision::kQueued);
    s.tick(60000);  // A has had a minute, B nothing: B's turn, whatever round_stay
    EXPECT_GT(s.lease("A1")->preempt_at_ms, 0);
    s.tick(70000);
    ASSERT_EQ(s.lease("B1")->state, LeaseState::kGranted);
    ASSERT_EQ(s.request(job("A"), 70000, "A2").kind, Decision::kQueued);
    s.tick(120000);
    s.tick(180000);  // B has had 110 s, A 70 s
    EXPECT_EQ(s.lease("B1")->preempt_at_ms > 0, stay == 1.0);  // with round_stay 2, B's 110 s count as 55
    s.tick(240000);  // B 170 s (85): A's turn either way
    EXPECT_EQ(s.lease("B1")->preempt_at_ms, stay == 1.0 ? 190000 : 250000);  // its notice: one round later
  }
}

TEST(Rounds, ThePolicySaysWhatARoundMayBe) {
  EXPECT_EQ(parsePolicy("[pools.default]\n").pools[0].round_stay, kDefaultRoundStay);
  EXPECT_EQ(parsePolicy("[pools.default]\nround_stay = 3\n").pools[0].round_stay, 3.0);
  EXPECT_NE(policyError("[pools.default]\nround_stay = 0.5\n").find("pools.default.round_stay must be in [1, 100]"), std::string::npos);
  EXPECT_EQ(parsePolicy("[pools.default]\norder = \"max-min\"\n").pools[0].round, std::chrono::minutes(6));
  EXPECT_EQ(parsePolicy("[pools.default]\norder = \"least-attained\"\n").pools[0].round, std::chrono::milliseconds(0));
  EXPECT_NE(policyError("[pools.default]\nround = \"1s\"\n").find("pools.default.round must be 0 (no rounds) or at least 10s"),
            std::string::npos);
  EXPECT_NE(policyError("[pools.default]\norder = \"max-min\"\nround = \"0s\"\n").find("round must not be 0"), std::string::npos);
  Scheduler s = make("[pools.default]\n");
  EXPECT_EQ(s.nextRound(), std::numeric_limits<int64_t>::max());
}

TEST(Rounds, ANewPolicyWithoutRoundsLeavesNoChoiceBehind) {
  const std::string settings = std::string(kSettings);
  Scheduler s = make(settings + "[pools.default]\norder = \"least-attained\"\nround = \"1m\"\n");
  s.registerServer(typed("k80s", 1, "Tesla K80"), 0);
  s.registerServer(typed("v100s", 1, "Tesla V100-SXM2-16GB"), 0);
  ASSERT_EQ(s.request(job("L", "lm"), 0, "L1").kind, Decision::kGranted);
  ASSERT_EQ(s.request(job("C", "cyclegan"), 0, "C1").kind, Decision::kGranted);
  s.tick(1000);  // the round swaps them: L is to go to the K80
  ASSERT_EQ(s.lease("L1")->preempted_for, "round: it moves to K80 this round (least-attained)");
  s.setPolicy(parsePolicy(settings), 2000);
  s.tick(11000);  // the notices given run out: both GPUs free
  ASSERT_EQ(s.lease("C1")->state, LeaseState::kEnded);
  ASSERT_EQ(s.request(job("L", "lm"), 11000, "L2").kind, Decision::kGranted);
  EXPECT_EQ(s.lease("L2")->shares[0].server, "v100s");  // its fastest type: the old round's choice is gone
}

TEST(Rounds, ARequestWaitingForTheTypeItsRoundChoseHoldsBackNoRequestForAnother) {
  // Three jobs on a K80 and a V100: the round runs X (lm, had least) on the K80, where C still runs
  // with notice. The V100 then frees. A request for the V100 alone is granted at once: X waits for the
  // K80 only.
  Scheduler s = make(std::string(kSettings) + "[pools.default]\norder = \"least-attained\"\nround = \"1m\"\n");
  s.registerServer(typed("k80s", 1, "Tesla K80"), 0);
  s.registerServer(typed("v100s", 1, "Tesla V100-SXM2-16GB"), 0);
  ASSERT_EQ(s.request(job("L", "lm"), 0, "L1").kind, Decision::kGranted);
  ASSERT_EQ(s.request(job("C", "cyclegan"), 0, "C1").kind, Decision::kGranted);
  ASSERT_EQ(s.request(job("X", "lm"), 0, "X1").kind, Decision::kQueued);
  s.tick(1000);
  ASSERT_EQ(s.lease("X1")->round_type, "K80");
  ASSERT_GT(s.lease("C1")->preempt_at_ms, 0);  // C moves to the V100 at the notice's end
  ASSERT_TRUE(s.end("L1", "released", 2000));  // the V100 is free; the K80 is not yet
  LeaseRequest v100 = req("v");
  v100.gpu_types = {"V100"};
  EXPECT_EQ(s.request(v100, 2000, "V1").kind, Decision::kGranted);
  EXPECT_EQ(s.lease("X1")->state, LeaseState::kQueued);
}
