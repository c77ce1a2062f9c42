// Queues with guaranteed shares (issue 14, allocator/src/fair_share.h): the policy's [queues], their
// limits, and the grant order among them: within guarantee first, then leftover capacity by weight.
#include <gtest/gtest.h>

#include "scheduler_fixtures.h"

using namespace gpool::allocator;
using namespace gpool::allocator::fixtures;

namespace {

double held(const Scheduler& s, const std::string& user) {
  double gpus = 0;
  for (const auto& [id, l] : s.leases())
    if (l.state == LeaseState::kGranted && l.req.user == user)
      for (const auto& sh : l.shares) gpus += sh.fraction;
  return gpus;
}

const char* kTwoTeams = R"(
[pools.default]
fractions = [1.0, 0.5, 0.25]
[queues.vision]
guarantee = { gpus = 1 }
weight = 1
members = ["ann"]
[queues.speech]
guarantee = { gpus = 1 }
weight = 3
members = ["@speech"]
)";

}  // namespace

TEST(Queues, PolicyErrorsNameTheQueue) {
  auto error = policyError;
  EXPECT_NE(error("[queues.a]\nparent = \"b\"\n").find("queues.a.parent 'b' is not a queue"), std::string::npos);
  EXPECT_NE(error("[queues.a]\nparent = \"b\"\n[queues.b]\nparent = \"a\"\n").find("form a cycle"), std::string::npos);
  EXPECT_NE(error("[queues.a]\nweight = 0\n").find("queues.a.weight must be in (0, 1e6]"), std::string::npos);
  EXPECT_NE(error("[queues.a]\nguarantee = { gpus = 4 }\nlimit = { gpus = 2 }\n").find("exceeds the limit"), std::string::npos);
  EXPECT_NE(error("[queues.a]\nguarantee = { gpus = 1 }\n[queues.b]\nparent = \"a\"\nguarantee = { gpus = 2 }\n")
                .find("queues.a: its children are guaranteed 2 GPUs, more than its own 1"),
            std::string::npos);
  EXPECT_NE(error("[queues.a]\nmembers = [\"ann\"]\n[queues.b]\nmembers = [\"ann\"]\n").find("'ann' is a member of both"), std::string::npos);
  EXPECT_NE(error("[queues.a]\ncolour = 1\n").find("unknown key 'colour' in queues.a"), std::string::npos);
  EXPECT_NE(error("[queues.\"a\\\"} 1\\n\"]\n").find("queue names are 1-64 letters"), std::string::npos);  // no metrics injection
  Policy p = parsePolicy("[queues.child]\nparent = \"top\"\nmembers = [\"@g\"]\n[queues.top]\nmembers = [\"ann\"]\n");
  ASSERT_EQ(p.queues.size(), 2u);
  EXPECT_EQ(p.queues[0].name, "top");  // parents first
  EXPECT_EQ(p.queueOf("ann", {"g"})->name, "top");  // by name before by group
  EXPECT_EQ(p.queueOf("bob", {"g"})->name, "child");
  EXPECT_EQ(p.queueOf("bob", {"h"}), nullptr);
}

TEST(Queues, AQueueBorrowsIdleGpusBeyondItsGuarantee) {
  Scheduler s = make(kTwoTeams);
  s.registerServer(server("a", 4), 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.request(req("ann"), 0, "A" + std::to_string(i)).kind, Decision::kGranted);
  EXPECT_DOUBLE_EQ(held(s, "ann"), 4.0);  // guaranteed 1, borrowing 3 that nobody else wants
}

namespace {

// Two GPUs, both held by vision's ann (A0, A1: one borrowed). Then both wait: ann beyond her guarantee
// (A2) first in time, bob of speech within his (B0).
void borrowedThenBothWait(Scheduler& s) {
  s.registerServer(server("a", 2), 0);
  ASSERT_EQ(s.request(req("ann"), 0, "A0").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("ann"), 0, "A1").kind, Decision::kGranted);  // borrowed
  auto bob = req("bob");
  bob.member_of = {"speech"};
  ASSERT_EQ(s.request(req("ann"), 1, "A2").kind, Decision::kQueued);
  ASSERT_EQ(s.request(bob, 2, "B0").kind, Decision::kQueued);
}

}  // namespace

TEST(Queues, WithinGuaranteeIsGrantedBeforeBorrowing) {
  Scheduler s = make(kTwoTeams);
  ASSERT_NO_FATAL_FAILURE(borrowedThenBothWait(s));
  EXPECT_TRUE(s.end("A0", "released", 3));
  EXPECT_EQ(s.lease("B0")->state, LeaseState::kGranted);  // within guarantee goes first, though later
  EXPECT_EQ(s.lease("A2")->state, LeaseState::kQueued);
}

TEST(Queues, QueuePositionsFollowTheGrantOrder) {
  Scheduler s = make(kTwoTeams);
  ASSERT_NO_FATAL_FAILURE(borrowedThenBothWait(s));
  EXPECT_EQ(s.position("B0"), 2);  // by arrival, until a pass has placed it
  s.tick(3);
  EXPECT_EQ(s.position("B0"), 1);  // within its queue's guarantee: granted first
  EXPECT_EQ(s.position("A2"), 2);
  EXPECT_TRUE(s.end("A0", "released", 4));
  EXPECT_EQ(s.position("B0"), 0);  // granted
  EXPECT_EQ(s.position("A2"), 1);
}

TEST(Queues, WeightsDivideLeftoverCapacityInProportion) {
  const char* toml = R"(
[pools.default]
fractions = [1.0, 0.5, 0.25]
[queues.vision]
weight = 1
members = ["ann"]
[queues.speech]
weight = 3
members = ["bob"]
)";
  Scheduler s = make(toml);
  s.registerServer(server("a", 4), 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(s.request(req("carol"), 0, "C" + std::to_string(i)).kind, Decision::kGranted);
  // Both ask for far more than there is while nothing is free, then 4 GPUs (16 quarters) come free.
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(s.request(req("ann", 0.25), i, "A" + std::to_string(i)).kind, Decision::kQueued);
    EXPECT_EQ(s.request(req("bob", 0.25), i, "B" + std::to_string(i)).kind, Decision::kQueued);
  }
  for (int i = 0; i < 4; ++i) s.end("C" + std::to_string(i), "released", 30);
  EXPECT_DOUBLE_EQ(held(s, "ann") + held(s, "bob"), 4.0);
  EXPECT_DOUBLE_EQ(held(s, "ann"), 1.0);
  EXPECT_DOUBLE_EQ(held(s, "bob"), 3.0);  // 3 : 1, as the weights
}

TEST(Queues, ALimitCapsAQueueAndItsChildrenTogether) {
  const char* toml = R"(
[pools.default]
fractions = [1.0, 0.5]
[queues.lab]
limit = { gpus = 1.5 }
[queues.lab-a]
parent = "lab"
members = ["ann"]
[queues.lab-b]
parent = "lab"
members = ["bob"]
)";
  Scheduler s = make(toml);
  s.registerServer(server("a", 4), 0);
  EXPECT_EQ(s.request(req("ann"), 0, "A0").kind, Decision::kGranted);
  EXPECT_EQ(s.request(req("bob", 0.5), 0, "B0").kind, Decision::kGranted);
  auto d = s.request(req("bob", 0.5), 0, "B1");
  EXPECT_EQ(d.kind, Decision::kQueued);
  EXPECT_NE(d.reason.find("queue 'lab' holds 1.5 of its limit of 1.5 GPUs"), std::string::npos) << d.reason;
  EXPECT_EQ(s.request(req("carol"), 0, "C0").kind, Decision::kGranted);  // in no queue: not held back
  EXPECT_TRUE(s.end("A0", "released", 1));
  EXPECT_EQ(s.lease("B1")->state, LeaseState::kGranted);
}

TEST(Queues, ANewPolicyCountsWhatIsHeldUnderItsQueues) {
  Scheduler s = make(kTwoTeams);
  s.registerServer(server("a", 4), 0);
  ASSERT_EQ(s.request(req("ann"), 0, "A0").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("ann"), 0, "A1").kind, Decision::kGranted);
  s.setPolicy(parsePolicy("[queues.vision]\nlimit = { gpus = 2 }\nmembers = [\"ann\"]\n"), 1);
  auto d = s.request(req("ann"), 2, "A2");
  EXPECT_EQ(d.kind, Decision::kQueued);
  EXPECT_NE(d.reason.find("queue 'vision' holds 2 of its limit of 2 GPUs"), std::string::npos) << d.reason;
  auto views = s.fairShare().view();
  ASSERT_EQ(views.size(), 1u);
  EXPECT_DOUBLE_EQ(views[0].gpus, 2.0);
}

namespace {

// Vision borrows the whole server; speech is guaranteed 2 GPUs of it. 10 s of notice.
const char* kPreempt = R"(
[settings]
preemption_grace = "10s"
lease_ttl = "1h"
server_timeout = "1h"
[queues.vision]
guarantee = { gpus = 1 }
members = ["ann", "amy"]
[queues.speech]
guarantee = { gpus = 2 }
members = ["bob"]
)";

int preempting(const Scheduler& s) {
  int n = 0;
  for (const auto& [id, l] : s.leases()) n += l.state == LeaseState::kGranted && l.preempt_at_ms != 0;
  return n;
}

}  // namespace

TEST(Preemption, ExactlyEnoughBorrowedLeasesGetNoticeThenGoAndTheRequestIsGranted) {
  Scheduler s = make(kPreempt);
  s.registerServer(server("a", 4), 0);
  auto low = req("amy");
  low.priority = "low";
  ASSERT_EQ(s.request(req("ann"), 0, "V0").kind, Decision::kGranted);
  ASSERT_EQ(s.request(low, 1, "V1").kind, Decision::kGranted);   // lowest priority: first to go
  ASSERT_EQ(s.request(req("ann"), 2, "V2").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("ann"), 3, "V3").kind, Decision::kGranted);  // most recent of the rest: next
  ASSERT_EQ(s.request(req("bob", 1.0, 2), 4, "S0").kind, Decision::kQueued);  // within speech's guarantee
  EXPECT_EQ(preempting(s), 0);  // the allocator's next tick gives notice
  s.tick(4);
  const std::string& why = s.lease("S0")->wait_reason;
  EXPECT_NE(why.find("2 borrowing lease(s) are being preempted for it"), std::string::npos) << why;
  EXPECT_EQ(preempting(s), 2);
  EXPECT_EQ(s.lease("V1")->preempt_at_ms, 4 + 10000);
  EXPECT_EQ(s.lease("V3")->preempt_at_ms, 4 + 10000);
  EXPECT_EQ(s.lease("V3")->preempted_for, "S0");
  s.tick(5000);  // within the grace period: nothing is revoked, and no more notice is given
  EXPECT_EQ(s.lease("V1")->state, LeaseState::kGranted);
  EXPECT_EQ(preempting(s), 2);
  s.tick(10004);
  EXPECT_EQ(s.lease("V1")->state, LeaseState::kEnded);
  EXPECT_EQ(s.lease("V3")->state, LeaseState::kEnded);
  EXPECT_NE(s.lease("V3")->end_reason.find("preempted: queue 'speech' took back its guarantee"), std::string::npos);
  EXPECT_EQ(s.lease("S0")->state, LeaseState::kGranted);  // in the same tick
  EXPECT_EQ(preempting(s), 0);  // the first revocation did not make it give notice to a third lease
  EXPECT_EQ(s.lease("V0")->state, LeaseState::kGranted);  // vision keeps its guarantee and one more
  EXPECT_EQ(s.lease("V2")->state, LeaseState::kGranted);
}

TEST(Preemption, ALeaseWhoseTimeLimitEndsItWithinTheGraceSparesTheOthers) {
  Scheduler s = make(kPreempt);
  s.registerServer(server("a", 4), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(s.request(req("ann"), i, "V" + std::to_string(i)).kind, Decision::kGranted);
  auto limited = req("ann");
  limited.time_limit_ms = 15000;
  ASSERT_EQ(s.request(limited, 3, "V3").kind, Decision::kGranted);  // the newest: the first to go, but for its limit
  s.tick(5003);
  EXPECT_EQ(s.lease("V3")->notice, Notice::kTimeLimit);  // its limit comes in 10 s: notice now
  ASSERT_EQ(s.request(req("bob"), 5004, "S0").kind, Decision::kQueued);  // within speech's guarantee
  s.tick(5005);
  EXPECT_EQ(preempting(s), 1);  // V3's limit, and no preemption
  EXPECT_EQ(s.lease("V2")->preempt_at_ms, 0);
  s.tick(15003);
  EXPECT_EQ(s.lease("V3")->state, LeaseState::kEnded);
  EXPECT_EQ(s.lease("S0")->state, LeaseState::kGranted);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.lease("V" + std::to_string(i))->state, LeaseState::kGranted);
}

TEST(Preemption, ANonPreemptibleLeaseIsNeverTouched) {
  std::string policy = kPreempt;
  policy.replace(policy.find("guarantee = { gpus = 1 }"), 24, "guarantee = { gpus = 2 }");
  Scheduler s = make(policy);
  s.registerServer(server("a", 3), 0);
  auto fixed = req("ann");
  fixed.preemptible = false;
  fixed.priority = "low";  // the first to go, were it preemptible
  ASSERT_EQ(s.request(fixed, 0, "V0").kind, Decision::kGranted);
  ASSERT_EQ(s.request(fixed, 1, "V1").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("ann"), 2, "V2").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("bob"), 3, "S0").kind, Decision::kQueued);
  s.tick(3);
  EXPECT_EQ(preempting(s), 1);
  EXPECT_NE(s.lease("V2")->preempt_at_ms, 0);  // the one preemptible lease goes
  ASSERT_EQ(s.request(req("bob"), 4, "S1").kind, Decision::kQueued);
  s.tick(4);
  EXPECT_EQ(preempting(s), 1);  // nothing else of vision may be taken
  s.tick(20000);
  EXPECT_EQ(s.lease("V0")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("V1")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("S0")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("S1")->state, LeaseState::kQueued);
}

// Otherwise a queue could borrow for good by marking its work non-preemptible.
TEST(Preemption, ANonPreemptibleRequestStaysWithinItsQueuesGuarantee) {
  Scheduler s = make(kPreempt);
  s.registerServer(server("a", 4), 0);
  auto fixed = req("ann");
  fixed.preemptible = false;
  ASSERT_EQ(s.request(fixed, 0, "V0").kind, Decision::kGranted);  // vision's guarantee is 1 GPU
  auto d = s.request(fixed, 1, "V1");
  ASSERT_EQ(d.kind, Decision::kQueued);
  EXPECT_NE(d.reason.find("non-preemptible request is granted only within its queue's guarantee"), std::string::npos) << d.reason;
  EXPECT_EQ(s.request(req("ann"), 2, "V2").kind, Decision::kGranted);  // a preemptible one borrows
  auto outsider = req("zoe");
  outsider.preemptible = false;
  d = s.request(outsider, 3, "Z0");
  ASSERT_EQ(d.kind, Decision::kQueued);
  EXPECT_NE(d.reason.find("user 'zoe' is in no queue"), std::string::npos) << d.reason;
}

TEST(Preemption, WhatIsFreeIsNotTakenFromAnyone) {
  Scheduler s = make(kPreempt);
  s.registerServer(server("a", 4), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(s.request(req("ann"), i, "V" + std::to_string(i)).kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("bob", 1.0, 2), 3, "S0").kind, Decision::kQueued);  // one GPU is free: one more is needed
  s.tick(3);
  EXPECT_EQ(preempting(s), 1);
  s.tick(10003);
  EXPECT_EQ(s.lease("S0")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("V1")->state, LeaseState::kGranted);
}

// A revoked lease's share counts on its GPU until its server says the worker is gone: meanwhile the
// request it was revoked for must not take more borrowed leases for the same room.
TEST(Preemption, RoomThatIsStillDrainingIsNotTakenTwice) {
  Scheduler s = make(kPreempt);
  s.registerServer(server("a", 4), 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(s.request(req("ann"), i, "V" + std::to_string(i)).kind, Decision::kGranted);
  std::vector<std::string> revoked;
  ASSERT_TRUE(s.heartbeatServer("a", 5, {"V0", "V1", "V2", "V3"}, revoked));  // it runs workers for all four
  ASSERT_EQ(s.request(req("bob", 1.0, 2), 6, "S0").kind, Decision::kQueued);
  s.tick(6);
  EXPECT_EQ(preempting(s), 2);
  s.tick(10006);  // V2 and V3 are revoked; their workers still run
  EXPECT_EQ(s.lease("V3")->state, LeaseState::kEnded);
  EXPECT_EQ(s.lease("S0")->state, LeaseState::kQueued);
  s.tick(10007);
  EXPECT_EQ(preempting(s), 0);  // V1 borrows too, but its room is not needed
  ASSERT_TRUE(s.heartbeatServer("a", 10008, {"V0", "V1"}, revoked));
  s.tick(10009);
  EXPECT_EQ(s.lease("S0")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("V1")->state, LeaseState::kGranted);
}

TEST(Preemption, RoomIsTakenWhereItMakesAWholeShareNotInPiecesOnManyGpus) {
  Scheduler s = make(kPreempt);
  s.registerServer(server("a", 2), 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(s.request(req("ann", 0.5), i, "V" + std::to_string(i)).kind, Decision::kGranted);
  ASSERT_EQ(s.lease("V0")->shares[0].device, s.lease("V1")->shares[0].device);  // halves packed two to a GPU
  ASSERT_TRUE(s.end("V1", "released", 4));
  ASSERT_EQ(s.request(req("ann", 0.5), 5, "V4").kind, Decision::kGranted);  // beside V0
  ASSERT_EQ(s.lease("V4")->shares[0].device, s.lease("V0")->shares[0].device);
  // Vision borrows 1 GPU in halves: V4 and V3 are the most recently granted, but on two GPUs they free no
  // whole GPU. V3 and V2 share one.
  ASSERT_EQ(s.request(req("bob"), 6, "S0").kind, Decision::kQueued);
  s.tick(6);
  EXPECT_EQ(preempting(s), 2);
  EXPECT_NE(s.lease("V3")->preempt_at_ms, 0);
  EXPECT_NE(s.lease("V2")->preempt_at_ms, 0);
  EXPECT_EQ(s.lease("V4")->preempt_at_ms, 0);
  s.tick(10006);
  EXPECT_EQ(s.lease("S0")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("S0")->shares[0].device, s.lease("V3")->shares[0].device);
  EXPECT_EQ(s.lease("V4")->state, LeaseState::kGranted);
}

TEST(Preemption, NobodyIsPreemptedWhenNoChoiceMakesRoom) {
  Scheduler s = make(R"(
[settings]
preemption_grace = "10s"
[queues.vision]
members = ["ann"]
[queues.ops]
guarantee = { gpus = 1 }
members = ["oz"]
[queues.speech]
guarantee = { gpus = 2 }
members = ["bob"]
)");
  s.registerServer(server("a", 2), 0);
  auto pinned = req("oz", 0.5);
  pinned.preemptible = false;
  // Each GPU: one half that may not be taken (ops, within its guarantee), one that vision borrows.
  ASSERT_EQ(s.request(pinned, 0, "N0").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("ann", 0.5), 1, "V0").kind, Decision::kGranted);
  ASSERT_EQ(s.request(pinned, 2, "N1").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("ann", 0.5), 3, "V1").kind, Decision::kGranted);
  ASSERT_NE(s.lease("V0")->shares[0].device, s.lease("V1")->shares[0].device);
  ASSERT_EQ(s.request(req("bob"), 4, "S0").kind, Decision::kQueued);  // a whole GPU, within speech's guarantee
  s.tick(4);
  EXPECT_EQ(preempting(s), 0);  // the two borrowed halves would free no whole GPU
  EXPECT_EQ(s.request(req("bob", 0.5), 5, "S1").kind, Decision::kQueued);
  s.tick(5);
  EXPECT_EQ(preempting(s), 0);  // S0 comes first and still cannot be helped; S1 waits behind it
}

TEST(Preemption, NoticeIsWithdrawnWhenTheRequestNoLongerWaits) {
  Scheduler s = make(kPreempt);
  s.registerServer(server("a", 2), 0);
  ASSERT_EQ(s.request(req("ann"), 0, "V0").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("ann"), 1, "V1").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("bob"), 2, "S0").kind, Decision::kQueued);
  s.tick(2);
  EXPECT_EQ(preempting(s), 1);
  EXPECT_TRUE(s.end("S0", "cancelled", 3));
  s.tick(20000);
  EXPECT_EQ(preempting(s), 0);
  EXPECT_EQ(s.lease("V1")->state, LeaseState::kGranted);
}

TEST(Preemption, ARequestBeyondItsGuaranteeTakesNothing) {
  Scheduler s = make(kPreempt);
  s.registerServer(server("a", 3), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(s.request(req("ann"), i, "V" + std::to_string(i)).kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("bob", 1.0, 2), 3, "S0").kind, Decision::kQueued);
  s.tick(3);
  EXPECT_EQ(preempting(s), 2);  // all vision has beyond its guarantee
  ASSERT_EQ(s.request(req("bob"), 4, "S1").kind, Decision::kQueued);  // would be speech's third GPU
  s.tick(4);
  EXPECT_EQ(preempting(s), 2);
}
