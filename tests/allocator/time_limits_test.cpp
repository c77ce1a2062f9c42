// Time limits (allocator/src/time_limits.cpp): notice the grace period before a lease's limit, its end at
// the limit; a pool's max_time as the default limit and the most one may ask; the limit across a restore.
#include <gtest/gtest.h>

#include "model_json.h"
#include "scheduler_fixtures.h"

using namespace gpool::allocator;
using namespace gpool::allocator::fixtures;

namespace {

constexpr const char* kPolicy = "[settings]\nlease_ttl = \"720h\"\nserver_timeout = \"720h\"\npreemption_grace = \"30s\"\n"
                                "[pools.default]\nfractions = [1.0, 0.5]\n"
                                "[pools.short]\nservers = [\"b\"]\nmax_time = \"10m\"\n";

LeaseRequest limited(const std::string& user, int64_t limit_ms, const std::string& pool = "default") {
  LeaseRequest r = req(user);
  r.time_limit_ms = limit_ms;
  r.pool = pool;
  return r;
}

}  // namespace

TEST(TimeLimits, NoticeComesTheGraceBeforeTheLimitAndTheLeaseEndsAtIt) {
  Scheduler s = make(kPolicy);
  s.registerServer(server("a", 1), 0);
  ASSERT_EQ(s.request(limited("u", 3600'000), 1000, "L1").kind, Decision::kGranted);
  s.tick(1000 + 3600'000 - 30'001);
  EXPECT_EQ(s.lease("L1")->notice, Notice::kNone);
  s.tick(1000 + 3600'000 - 30'000);
  EXPECT_EQ(s.lease("L1")->notice, Notice::kTimeLimit);
  EXPECT_EQ(s.lease("L1")->preempt_at_ms, 1000 + 3600'000);
  EXPECT_EQ(s.lease("L1")->preempted_for, "time limit: 1h");
  s.tick(1000 + 3600'000 - 1);
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kGranted);
  s.request(req("v"), 1000 + 3600'000 - 1, "L2");  // waits for the GPU
  s.tick(1000 + 3600'000);
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kEnded);
  EXPECT_EQ(s.lease("L1")->end_reason, "reached its time limit (1h)");
  EXPECT_EQ(s.timeLimited(), 1u);
  EXPECT_EQ(s.lease("L2")->state, LeaseState::kGranted);  // the room went on at once
  s.tick(1000 + 3 * 3600'000);
  EXPECT_EQ(s.lease("L2")->state, LeaseState::kGranted);  // no limit asked, none in its pool
}

TEST(TimeLimits, ALimitShorterThanTheGraceHasNoticeAtItsGrant) {
  Scheduler s = make(kPolicy);
  s.registerServer(server("a", 1), 0);
  s.request(limited("u", 5'000), 0, "L1");
  s.tick(1);
  EXPECT_EQ(s.lease("L1")->notice, Notice::kTimeLimit);
  EXPECT_EQ(s.lease("L1")->preempted_for, "time limit: 5s");
  s.tick(5'000);
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kEnded);
}

TEST(TimeLimits, APoolsMaxTimeIsTheDefaultAndTheMostOneMayAsk) {
  Scheduler s = make(kPolicy);
  s.registerServer(server("b", 2), 0);
  Decision over = s.request(limited("u", 11 * 60'000, "short"), 0, "L1");
  EXPECT_EQ(over.kind, Decision::kRefused);
  EXPECT_EQ(over.reason, "pool 'short' runs a lease for at most 10m, less than the time limit 11m asked for");
  ASSERT_EQ(s.request(limited("u", 0, "short"), 0, "L2").kind, Decision::kGranted);
  EXPECT_EQ(s.lease("L2")->req.time_limit_ms, 600'000);
  ASSERT_EQ(s.request(limited("u", 60'000, "short"), 0, "L3").kind, Decision::kGranted);
  s.tick(60'000);
  EXPECT_EQ(s.lease("L3")->state, LeaseState::kEnded);
  EXPECT_EQ(s.lease("L2")->state, LeaseState::kGranted);
  s.tick(600'000);
  EXPECT_EQ(s.lease("L2")->state, LeaseState::kEnded);
}

TEST(TimeLimits, ARestoredLeaseKeepsItsLimitFromItsGrantByTheWallClock) {
  // Another host's replica takes over: its monotonic clock has nothing to do with the first one's.
  int64_t unix_s = 5000;
  auto make_at = [&] {
    return Scheduler(parsePolicy(kPolicy), [](const Lease& l, const Share&, int, int64_t) { return "tok-" + l.id; }, [&] { return unix_s; });
  };
  Scheduler first = make_at();
  first.registerServer(server("a", 1), 0);
  first.request(limited("u", 600'000), 7'000'000, "L1");  // granted at unix 5000
  unix_s = 5000 + 400;  // 400 s later, the new leader, whose clock reads 20 s
  Scheduler second = make_at();
  std::map<std::string, Lease> leases{{"L1", leaseFromJson(toJson(*first.lease("L1"), LeaseView::kRecord))}};
  second.restore(first.servers(), std::move(leases), 20'000);
  second.tick(20'000 + 199'000);
  EXPECT_EQ(second.lease("L1")->state, LeaseState::kGranted);
  second.tick(20'000 + 200'000);
  EXPECT_EQ(second.lease("L1")->state, LeaseState::kEnded);
}

TEST(TimeLimits, RequestsNameTheirLimitInSecondsOrAsADuration) {
  EXPECT_EQ(requestFromJson({{"time_limit", 90}}).time_limit_ms, 90'000);
  EXPECT_EQ(requestFromJson({{"time_limit", "2h"}}).time_limit_ms, 7'200'000);
  EXPECT_EQ(requestFromJson(nlohmann::json::object()).time_limit_ms, 0);
  for (auto bad : {nlohmann::json(0), nlohmann::json(-5), nlohmann::json(1e12), nlohmann::json("0s"), nlohmann::json(true), nlohmann::json("soon")})
    EXPECT_ANY_THROW(requestFromJson({{"time_limit", bad}})) << bad.dump();
  LeaseRequest r = requestFromJson({{"time_limit", "45m"}});
  r.user = "u";
  Lease l;
  l.id = "L1";
  l.req = r;
  EXPECT_EQ(leaseFromJson(toJson(l, LeaseView::kRecord)).req.time_limit_ms, 2'700'000);  // kept across a restart
}

TEST(TimeLimits, APolicyMayGiveAPoolAMaxTime) {
  EXPECT_EQ(policyError("[pools.default]\nmax_time = \"2h\"\n"), "accepted");
  EXPECT_NE(policyError("[pools.default]\nmax_time = \"two hours\"\n"), "accepted");
  EXPECT_EQ(parsePolicy("[pools.default]\nmax_time = \"2h\"\n").pools.at(0).max_time, std::chrono::hours(2));
}

TEST(TimeLimits, DurationsAreNamedInWholeSecondsRoundedUp) {
  using std::chrono::milliseconds;
  EXPECT_EQ(durationText(milliseconds(0)), "0s");
  EXPECT_EQ(durationText(milliseconds(1)), "1s");
  EXPECT_EQ(durationText(milliseconds(90'000)), "1m30s");
  EXPECT_EQ(durationText(milliseconds(5'400'000)), "1h30m");
  EXPECT_EQ(durationText(milliseconds(7'200'000)), "2h");
  EXPECT_EQ(durationText(milliseconds(3'661'000)), "1h1m1s");
}
