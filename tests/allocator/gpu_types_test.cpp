// GPU types (issue 15): each GPU's type from its model (or the policy's [gpu_types]), and requests that
// name the types they may run on.
#include <gtest/gtest.h>

#include "scheduler_fixtures.h"

using namespace gpool::allocator;
using namespace gpool::allocator::fixtures;

namespace {

LeaseRequest on(const std::vector<std::string>& types, double p = 1.0, int n = 1) {
  LeaseRequest r = req("u", p, n);
  r.gpu_types = types;
  return r;
}

}  // namespace

TEST(GpuTypes, TheModelNamesItsFamily) {
  Policy p;
  EXPECT_EQ(p.gpuTypeOf("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(p.gpuTypeOf("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(p.gpuTypeOf("Tesla V100-SXM2-16GB"), "V100");
  EXPECT_EQ(p.gpuTypeOf("NVIDIA L4"), "L4");
  EXPECT_EQ(p.gpuTypeOf("NVIDIA GeForce RTX 4090"), "RTX4090");
  EXPECT_EQ(p.gpuTypeOf(""), "unknown");
  EXPECT_EQ(p.gpuTypeOf("gpool sim device (no GPU)"), "sim");
  Policy q = parsePolicy("[gpu_types]\nH100-NVL = [\"*H100 NVL*\"]\nsim = [\"gpool sim*\"]\n");
  EXPECT_EQ(q.gpuTypeOf("NVIDIA H100 NVL"), "H100-NVL");  // the policy's patterns first, in any case
  EXPECT_EQ(q.gpuTypeOf("GPOOL SIM device (no GPU)"), "sim");
  EXPECT_EQ(q.gpuTypeOf("NVIDIA H100 80GB HBM3"), "H100");
  auto error = policyError;
  EXPECT_NE(error("[gpu_types]\nH100 = []\n").find("gpu_types.H100 must be a list of model patterns"), std::string::npos);
  EXPECT_NE(error("[gpu_types]\n\"a b\" = [\"x\"]\n").find("GPU type names are 1-64"), std::string::npos);
}

TEST(GpuTypes, ARequestRunsOnlyOnTheTypesItNames) {
  Scheduler s = make("");
  s.registerServer(typed("a100s", 2, "NVIDIA A100-SXM4-80GB"), 0);
  s.registerServer(typed("h100s", 1, "NVIDIA H100 80GB HBM3"), 0);
  EXPECT_EQ(s.servers().at("h100s").gpus[0].type, "H100");
  Decision d = s.request(on({"h100"}), 0, "H0");  // any case
  ASSERT_EQ(d.kind, Decision::kGranted);
  EXPECT_EQ(s.lease("H0")->shares[0].server, "h100s");
  d = s.request(on({"H100"}), 0, "H1");  // the only H100 is taken: it waits, though A100s are free
  ASSERT_EQ(d.kind, Decision::kQueued);
  EXPECT_NE(d.reason.find("(0 of 1 available GPUs fit now)"), std::string::npos) << d.reason;
  // An A100 request does not wait behind it; one that could take an H100 too, or any GPU, does.
  ASSERT_EQ(s.request(on({"A100"}), 0, "A0").kind, Decision::kGranted);
  EXPECT_EQ(s.lease("A0")->shares[0].server, "a100s");
  EXPECT_EQ(s.request(on({"H100", "A100"}), 0, "X0").kind, Decision::kQueued);
  EXPECT_EQ(s.request(on({}), 0, "Y0").kind, Decision::kQueued);
  EXPECT_TRUE(s.end("H0", "released", 1));  // H1 first, then X0 on the last A100; Y0 waits
  EXPECT_EQ(s.lease("H1")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("H1")->shares[0].server, "h100s");
  EXPECT_EQ(s.lease("X0")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("X0")->shares[0].server, "a100s");
  EXPECT_EQ(s.lease("Y0")->state, LeaseState::kQueued);
}

TEST(GpuTypes, ATypeThePoolLacksIsRefusedWithTheTypesItHas) {
  Scheduler s = make("");
  s.registerServer(typed("a100s", 2, "NVIDIA A100-SXM4-80GB"), 0);
  s.registerServer(typed("l4s", 1, "NVIDIA L4"), 0);
  Decision d = s.request(on({"H100"}), 0, "L0");
  EXPECT_EQ(d.kind, Decision::kRefused);
  EXPECT_NE(d.reason.find("pool 'default' has no GPU of type H100 (its types: A100, L4)"), std::string::npos) << d.reason;
  d = s.request(on({"L4"}, 1.0, 2), 0, "L1");
  EXPECT_EQ(d.kind, Decision::kRefused);
  EXPECT_NE(d.reason.find("asks for 2 GPUs; pool 'default' has 1 of the types it accepts"), std::string::npos) << d.reason;
}

TEST(GpuTypes, APolicyChangeRetypesTheGpus) {
  Scheduler s = make("");
  s.registerServer(typed("big", 1, "NVIDIA H100 NVL"), 0);
  EXPECT_EQ(s.request(on({"H100-NVL"}), 0, "S0").kind, Decision::kRefused);
  s.setPolicy(parsePolicy("[gpu_types]\nH100-NVL = [\"*H100 NVL\"]\n"), 1);
  EXPECT_EQ(s.servers().at("big").gpus[0].type, "H100-NVL");
  EXPECT_EQ(s.request(on({"H100-NVL"}), 1, "S1").kind, Decision::kGranted);
}

TEST(JobKinds, AKnownKindGoesToItsFastestTypeWithRoom) {
  const char* toml = R"(
[job_kinds.recommendation]
K80 = 32.9
V100 = 23.3
[job_kinds.cyclegan]
K80 = 0.5
V100 = 4.4
[job_kinds.cpu-only-here]
K80 = 0
V100 = 1
)";
  Policy p = parsePolicy(toml);
  EXPECT_DOUBLE_EQ(p.relativeSpeed("cyclegan", "V100"), 1.0);
  EXPECT_NEAR(p.relativeSpeed("cyclegan", "K80"), 0.5 / 4.4, 1e-12);
  EXPECT_DOUBLE_EQ(p.relativeSpeed("unknown", "K80"), 1.0);   // nothing known: no preference
  EXPECT_DOUBLE_EQ(p.relativeSpeed("cyclegan", "H100"), 1.0);  // a type the table does not name
  Scheduler s = make(toml);
  s.registerServer(typed("k80s", 2, "Tesla K80"), 0);
  s.registerServer(typed("v100s", 2, "Tesla V100-SXM2-16GB"), 0);
  auto of = [](const std::string& kind) {
    LeaseRequest r = req("u");
    r.kind = kind;
    return r;
  };
  ASSERT_EQ(s.request(of("recommendation"), 0, "R0").kind, Decision::kGranted);
  EXPECT_EQ(s.lease("R0")->shares[0].server, "k80s");  // faster on a K80 than on a V100
  ASSERT_EQ(s.request(of("cyclegan"), 0, "C0").kind, Decision::kGranted);
  EXPECT_EQ(s.lease("C0")->shares[0].server, "v100s");
  ASSERT_EQ(s.request(of("cyclegan"), 0, "C1").kind, Decision::kGranted);
  EXPECT_EQ(s.lease("C1")->shares[0].server, "v100s");
  ASSERT_EQ(s.request(of("cyclegan"), 0, "C2").kind, Decision::kGranted);  // V100s full: a K80 is still a GPU
  EXPECT_EQ(s.lease("C2")->shares[0].server, "k80s");
  EXPECT_TRUE(s.end("C0", "released", 1));
  Decision d = s.request(of("cpu-only-here"), 1, "X0");  // a throughput of 0 on K80: only the V100 will do
  ASSERT_EQ(d.kind, Decision::kGranted);
  EXPECT_EQ(s.lease("X0")->shares[0].server, "v100s");
  EXPECT_EQ(s.request(of("cpu-only-here"), 1, "X1").kind, Decision::kQueued);  // a K80 is free, but useless to it
}

TEST(JobKinds, AnAgnosticPoolIgnoresTheTable) {
  Scheduler s = make("[job_kinds.cyclegan]\nK80 = 0.5\nV100 = 4.4\n[pools.default]\nheterogeneity = \"agnostic\"\n");
  s.registerServer(typed("k80s", 1, "Tesla K80"), 0);
  s.registerServer(typed("v100s", 1, "Tesla V100-SXM2-16GB"), 0);
  LeaseRequest r = req("u");
  r.kind = "cyclegan";
  ASSERT_EQ(s.request(r, 0, "C0").kind, Decision::kGranted);
  EXPECT_EQ(s.lease("C0")->shares[0].server, "k80s");  // the first that fits, as without the table
  EXPECT_NE(policyError("[pools.default]\nheterogeneity = \"smart\"\n").find("must be one of aware, agnostic"), std::string::npos);
  EXPECT_NE(policyError("[job_kinds.x]\nV100 = -1\n").find("job_kinds.x.V100 must be a throughput >= 0"), std::string::npos);
}

namespace {

const char* kMoves = R"(
[settings]
preemption_grace = "10s"
lease_ttl = "100h"
server_timeout = "100h"
[job_kinds.cyclegan]
K80 = 0.5
V100 = 4.4
[pools.default]
moves_per_hour = 1
)";

LeaseRequest restartable(const std::string& kind, bool yes = true) {
  LeaseRequest r = req("u");
  r.kind = kind;
  r.restartable = yes;
  return r;
}

}  // namespace

TEST(Moves, AJobOnASlowTypeMovesWhenAFastOneFrees) {
  Scheduler s = make(kMoves);
  s.registerServer(typed("k80s", 2, "Tesla K80"), 0);
  s.registerServer(typed("v100s", 1, "Tesla V100-SXM2-16GB"), 0);
  ASSERT_EQ(s.request(req("other"), 0, "X").kind, Decision::kGranted);  // no kind: the first that fits
  ASSERT_EQ(s.lease("X")->shares[0].server, "k80s");
  ASSERT_EQ(s.request(restartable("cyclegan"), 0, "C0").kind, Decision::kGranted);
  ASSERT_EQ(s.lease("C0")->shares[0].server, "v100s");  // its fastest type with room
  ASSERT_EQ(s.request(restartable("cyclegan"), 0, "C1").kind, Decision::kGranted);
  ASSERT_EQ(s.lease("C1")->shares[0].server, "k80s");   // the V100 is taken: a K80 runs it at a ninth
  ASSERT_EQ(s.request(restartable("cyclegan", false), 0, "N0").kind, Decision::kQueued);
  s.tick(1);
  EXPECT_EQ(s.lease("C1")->preempt_at_ms, 0);  // nothing free to move to
  EXPECT_TRUE(s.end("N0", "cancelled", 2));
  EXPECT_TRUE(s.end("C0", "released", 2));  // the V100 frees, and nothing waits
  s.tick(3);
  EXPECT_EQ(s.lease("C1")->preempt_at_ms, 3 + 10000);
  EXPECT_EQ(s.lease("C1")->preempted_for, "move to V100");
  s.tick(10003);
  EXPECT_EQ(s.lease("C1")->state, LeaseState::kEnded);
  EXPECT_NE(s.lease("C1")->end_reason.find("moved: its job runs faster elsewhere (move to V100"), std::string::npos);
  EXPECT_EQ(s.moved(), 1u);
  EXPECT_EQ(s.preempted(), 0u);
  ASSERT_EQ(s.request(restartable("cyclegan"), 10003, "C1b").kind, Decision::kGranted);  // its launcher asks again
  EXPECT_EQ(s.lease("C1b")->shares[0].server, "v100s");
}

TEST(Moves, OnlyRestartableJobsMoveAndNoFasterThanTheCap) {
  Scheduler s = make(kMoves);
  s.registerServer(typed("k80s", 3, "Tesla K80"), 0);
  s.registerServer(typed("v100s", 2, "Tesla V100-SXM2-16GB"), 0);
  ASSERT_EQ(s.request(restartable("cyclegan"), 0, "V0").kind, Decision::kGranted);
  ASSERT_EQ(s.request(restartable("cyclegan"), 0, "V1").kind, Decision::kGranted);
  ASSERT_EQ(s.request(restartable("cyclegan", false), 0, "K0").kind, Decision::kGranted);  // on a K80, not restartable
  ASSERT_EQ(s.request(restartable("cyclegan"), 0, "K1").kind, Decision::kGranted);
  ASSERT_EQ(s.request(restartable("cyclegan"), 0, "K2").kind, Decision::kGranted);
  ASSERT_EQ(s.lease("K2")->shares[0].server, "k80s");
  EXPECT_TRUE(s.end("V0", "released", 1));
  EXPECT_TRUE(s.end("V1", "released", 1));
  s.tick(2);
  EXPECT_EQ(s.lease("K0")->preempt_at_ms, 0);  // it would not run again
  int noticed = (s.lease("K1")->preempt_at_ms != 0) + (s.lease("K2")->preempt_at_ms != 0);
  EXPECT_EQ(noticed, 1);  // moves_per_hour = 1
  s.tick(10002);
  s.tick(3600 * 1000 + 10);  // an hour later the other may move
  noticed = (s.lease("K1")->state == LeaseState::kGranted && s.lease("K1")->preempt_at_ms != 0) +
            (s.lease("K2")->state == LeaseState::kGranted && s.lease("K2")->preempt_at_ms != 0);
  EXPECT_EQ(noticed, 1);
  EXPECT_NE(policyError("[pools.default]\nmoves_per_hour = -1\n").find("moves_per_hour must be a whole number"), std::string::npos);
}
