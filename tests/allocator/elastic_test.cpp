// Elastic fractions (issue 14): a request with min_p takes a smaller fraction its pool offers when its
// whole one does not fit, once the pool's elastic_after has passed, and never less than min_p.
#include <gtest/gtest.h>

#include "scheduler_fixtures.h"

using namespace gpool::allocator;
using fixtures::kGiB;
using fixtures::make;

namespace {

void addServer(Scheduler& s, int gpus) { s.registerServer(fixtures::server("a", gpus), 0); }

LeaseRequest req(const std::string& user, double p, double min_p) {
  LeaseRequest r = fixtures::req(user, p);
  r.min_p = min_p;
  return r;
}

double granted(const Scheduler& s, const std::string& id) {
  const Lease* l = s.lease(id);
  return l && l->state == LeaseState::kGranted ? l->shares.at(0).fraction : 0;
}

const char* kAtOnce = "[settings]\nlease_ttl = \"1h\"\nserver_timeout = \"1h\"\n[pools.default]\nfractions = [1.0, 0.5, 0.25]\n";

}  // namespace

TEST(Elastic, UnderLoadItTakesTheLargestSmallerFractionThatFits) {
  Scheduler s = make(kAtOnce);
  addServer(s, 1);
  ASSERT_EQ(s.request(fixtures::req("ann", 0.5), 0, "A").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("bob", 1.0, 0.25), 1, "B").kind, Decision::kGranted);
  EXPECT_DOUBLE_EQ(granted(s, "B"), 0.5);
  EXPECT_EQ(s.lease("B")->shares.at(0).memory, 40 * kGiB);  // the memory of the fraction it got
  EXPECT_TRUE(s.end("A", "released", 2));
  EXPECT_TRUE(s.end("B", "released", 2));
  ASSERT_EQ(s.request(req("bob", 1.0, 0.25), 3, "C").kind, Decision::kGranted);
  EXPECT_DOUBLE_EQ(granted(s, "C"), 1.0);  // a whole GPU when one is free
}

TEST(Elastic, NeverLessThanTheMinimum) {
  Scheduler s = make(kAtOnce);
  addServer(s, 1);
  ASSERT_EQ(s.request(fixtures::req("ann", 0.5), 0, "A").kind, Decision::kGranted);
  ASSERT_EQ(s.request(fixtures::req("ann", 0.25), 0, "A2").kind, Decision::kGranted);
  auto d = s.request(req("bob", 1.0, 0.5), 1, "B");  // 0.25 is free
  ASSERT_EQ(d.kind, Decision::kQueued);
  EXPECT_NE(d.reason.find("waiting for 1 GPU(s) with 1 free"), std::string::npos) << d.reason;
  EXPECT_TRUE(s.end("A2", "released", 2));
  s.tick(3);
  EXPECT_DOUBLE_EQ(granted(s, "B"), 0.5);
}

TEST(Elastic, ThePoolDecidesWhen) {
  std::string after = std::string(kAtOnce) + "elastic_after = \"30s\"\n";
  Scheduler s = make(after);
  addServer(s, 1);
  ASSERT_EQ(s.request(fixtures::req("ann", 0.5), 0, "A").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("bob", 1.0, 0.25), 1000, "B").kind, Decision::kQueued);  // waits for the whole GPU first
  s.tick(20000);
  EXPECT_EQ(s.lease("B")->state, LeaseState::kQueued);
  s.tick(31000);
  EXPECT_DOUBLE_EQ(granted(s, "B"), 0.5);

  Scheduler never = make(std::string(kAtOnce) + "elastic_after = \"never\"\n");
  addServer(never, 1);
  ASSERT_EQ(never.request(fixtures::req("ann", 0.5), 0, "A").kind, Decision::kGranted);
  ASSERT_EQ(never.request(req("bob", 1.0, 0.25), 1, "B").kind, Decision::kQueued);
  never.tick(3600 * 1000);
  EXPECT_EQ(never.lease("B")->state, LeaseState::kQueued);
}

TEST(Elastic, AQuotaCountsTheFractionGranted) {
  Scheduler s = make(std::string(kAtOnce) + "[quotas.users]\nbob = { gpus = 0.5 }\n");
  addServer(s, 2);
  EXPECT_EQ(s.request(req("bob", 1.0, 0.75), 0, "X").kind, Decision::kRefused);  // even its least is over quota
  ASSERT_EQ(s.request(req("bob", 1.0, 0.25), 0, "B").kind, Decision::kGranted);   // whole GPUs are free, but...
  EXPECT_DOUBLE_EQ(granted(s, "B"), 0.5);                                          // ...bob may hold 0.5
  auto d = s.request(req("bob", 0.5, 0.25), 2, "B2");
  ASSERT_EQ(d.kind, Decision::kQueued);
  EXPECT_NE(d.reason.find("quota: user 'bob' holds 0.5 of 0.5 GPUs"), std::string::npos) << d.reason;
}

TEST(Elastic, RequestsAreChecked) {
  Scheduler s = make(kAtOnce);
  addServer(s, 1);
  auto d = s.request(req("ann", 0.5, 0.75), 0, "X");
  EXPECT_EQ(d.kind, Decision::kRefused);
  EXPECT_NE(d.reason.find("min_p"), std::string::npos) << d.reason;
  EXPECT_THROW(parsePolicy("[pools.default]\nelastic_after = \"soon\"\n"), PolicyError);
}
