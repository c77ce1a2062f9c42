// Queues with guaranteed shares (issue 14, allocator/src/fair_share.h): the policy's [queues], their
// limits, and the grant order among them: within guarantee first, then leftover capacity by weight.
#include <gtest/gtest.h>

#include "policy.h"
#include "scheduler.h"

using namespace gpool::allocator;

namespace {

constexpr uint64_t kGiB = 1ull << 30;

Server server(const std::string& name, int gpus) {
  Server s;
  s.name = name;
  s.address = "10.0.0.1:7420";
  for (int i = 0; i < gpus; ++i) s.gpus.push_back(Gpu{i, "GPU-" + name + std::to_string(i), "H100", 80 * kGiB, 132});
  return s;
}

Scheduler make(const std::string& toml) {
  return Scheduler(parsePolicy(toml), [](const Lease& l, const Share&, int64_t) { return "tok-" + l.id; }, [] { return int64_t{1000}; });
}

LeaseRequest req(const std::string& user, double p = 1.0, int n = 1) {
  LeaseRequest r;
  r.user = user;
  r.p = p;
  r.n = n;
  r.wait_ms = -1;
  return r;
}

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
  auto error = [](const std::string& toml) {
    try {
      parsePolicy(toml);
    } catch (const PolicyError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("[queues.a]\nparent = \"b\"\n").find("queues.a.parent 'b' is not a queue"), std::string::npos);
  EXPECT_NE(error("[queues.a]\nparent = \"b\"\n[queues.b]\nparent = \"a\"\n").find("form a cycle"), std::string::npos);
  EXPECT_NE(error("[queues.a]\nweight = 0\n").find("queues.a.weight must be in (0, 1e6]"), std::string::npos);
  EXPECT_NE(error("[queues.a]\nguarantee = { gpus = 4 }\nlimit = { gpus = 2 }\n").find("exceeds the limit"), std::string::npos);
  EXPECT_NE(error("[queues.a]\nguarantee = { gpus = 1 }\n[queues.b]\nparent = \"a\"\nguarantee = { gpus = 2 }\n")
                .find("queues.a: its children are guaranteed 2 GPUs, more than its own 1"),
            std::string::npos);
  EXPECT_NE(error("[queues.a]\nmembers = [\"ann\"]\n[queues.b]\nmembers = [\"ann\"]\n").find("'ann' is a member of both"), std::string::npos);
  EXPECT_NE(error("[queues.a]\ncolour = 1\n").find("unknown key 'colour' in queues.a"), std::string::npos);
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

TEST(Queues, WithinGuaranteeIsGrantedBeforeBorrowing) {
  Scheduler s = make(kTwoTeams);
  s.registerServer(server("a", 2), 0);
  ASSERT_EQ(s.request(req("ann"), 0, "A0").kind, Decision::kGranted);
  ASSERT_EQ(s.request(req("ann"), 0, "A1").kind, Decision::kGranted);  // borrowed
  // Both wait: ann beyond her guarantee first in time, bob (speech) within his.
  auto bob = req("bob");
  bob.member_of = {"speech"};
  EXPECT_EQ(s.request(req("ann"), 1, "A2").kind, Decision::kQueued);
  EXPECT_EQ(s.request(bob, 2, "B0").kind, Decision::kQueued);
  EXPECT_TRUE(s.end("A0", "released", 3));
  EXPECT_EQ(s.lease("B0")->state, LeaseState::kGranted);  // within guarantee goes first, though later
  EXPECT_EQ(s.lease("A2")->state, LeaseState::kQueued);
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
