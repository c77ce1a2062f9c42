// The allocator's decisions, policy parsing, lease tokens and the database, without HTTP.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "gpool/allocator/lease_token.h"
#include "policy.h"
#include "scheduler.h"
#include "scheduler_fixtures.h"
#include "sqlite_store.h"

using namespace gpool::allocator;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kGiB = 1ull << 30;

Server server(const std::string& name, int gpus, uint64_t memory = 80 * kGiB) {
  Server s;
  s.name = name;
  s.address = "10.0.0.1:7420";
  for (int i = 0; i < gpus; ++i) s.gpus.push_back(Gpu{i, "GPU-" + name + std::to_string(i), "H100", memory, 132});
  return s;
}

Scheduler make(const std::string& toml = "") {
  Policy p = toml.empty() ? Policy{} : parsePolicy(toml);
  return Scheduler(p, [](const Lease& l, const Share& s, int, int64_t) { return "tok-" + l.id + "-" + s.server; },
                   [] { return int64_t{1000}; });
}

LeaseRequest req(const std::string& user, double p = 1.0, int n = 1, int64_t wait_ms = -1) {
  LeaseRequest r;
  r.user = user;
  r.group = "g";
  r.p = p;
  r.n = n;
  r.wait_ms = wait_ms;
  return r;
}

}  // namespace

TEST(Scheduler, PacksTwoHalvesOnOneGpuAndQueuesTheThird) {
  Scheduler s = make();
  s.registerServer(server("a", 2), 0);
  auto d1 = s.request(req("u1", 0.5), 0, "L1");
  auto d2 = s.request(req("u2", 0.5), 0, "L2");
  ASSERT_EQ(d1.kind, Decision::kGranted);
  ASSERT_EQ(d2.kind, Decision::kGranted);
  EXPECT_EQ(s.lease("L1")->shares[0].device, s.lease("L2")->shares[0].device);  // packed
  auto d3 = s.request(req("u3", 1.0), 0, "L3");
  ASSERT_EQ(d3.kind, Decision::kGranted);  // the other GPU is whole
  auto d4 = s.request(req("u4", 0.5), 0, "L4");
  EXPECT_EQ(d4.kind, Decision::kQueued);
  EXPECT_EQ(s.position("L4"), 1);
  EXPECT_NE(d4.reason.find("waiting for 1 GPU(s) with 0.5 free"), std::string::npos) << d4.reason;
  EXPECT_TRUE(s.end("L1", "released", 10));  // its half frees, L4 gets it at once
  EXPECT_EQ(s.lease("L4")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("L4")->shares[0].token, "tok-L4-a");
}

TEST(Scheduler, SpreadPlacesOnTheEmptiestGpu) {
  Scheduler s = make("[pools.default]\nplacement = \"spread\"\n");
  s.registerServer(server("a", 2), 0);
  s.request(req("u", 0.5), 0, "L1");
  s.request(req("u", 0.5), 0, "L2");
  EXPECT_NE(s.lease("L1")->shares[0].device, s.lease("L2")->shares[0].device);
}

TEST(Scheduler, RefusesWhatCanNeverFitWithTheReason) {
  Scheduler s = make("[pools.default]\nfractions = [1.0, 0.5]\n[quotas.users.carol]\ngpus = 1\n");
  s.registerServer(server("a", 2, 40 * kGiB), 0);
  EXPECT_NE(s.request(req("u", 0.3), 0, "x").reason.find("offers fractions 1, 0.5 of a GPU, not 0.3"), std::string::npos);
  EXPECT_NE(s.request(req("u", 1.0, 3), 0, "x").reason.find("asks for 3 GPUs; pool 'default' has 2"), std::string::npos);
  auto big = req("u");
  big.m = 64 * kGiB;
  EXPECT_NE(s.request(big, 0, "x").reason.find("the largest GPU in pool 'default' has 40 GiB"), std::string::npos);
  EXPECT_NE(s.request(req("carol", 1.0, 2), 0, "x").reason.find("over quota: user 'carol' may hold 1 GPUs"), std::string::npos);
  auto pool = req("u");
  pool.pool = "nope";
  EXPECT_NE(s.request(pool, 0, "x").reason.find("no pool named 'nope'"), std::string::npos);
  auto prio = req("u");
  prio.priority = "urgent";
  EXPECT_NE(s.request(prio, 0, "x").reason.find("no priority class 'urgent'"), std::string::npos);
  EXPECT_EQ(s.leases().size(), 0u);  // refusals leave nothing behind
}

TEST(Scheduler, MemoryQuotaCountsFractionsWithoutAnExplicitSize) {
  Scheduler s = make("[quotas.users.dora]\nmemory = \"50GiB\"\n");
  s.registerServer(server("a", 2), 0);  // 80 GiB GPUs
  EXPECT_NE(s.request(req("dora", 1.0), 0, "x").reason.find("over quota: user 'dora' may hold 50 GiB"), std::string::npos);
  ASSERT_EQ(s.request(req("dora", 0.5), 0, "D1").kind, Decision::kGranted);  // 40 GiB
  auto d = s.request(req("dora", 0.25), 0, "D2");                          // 20 more: 60 > 50
  EXPECT_EQ(d.kind, Decision::kQueued);
  EXPECT_NE(d.reason.find("quota: user 'dora' holds 40 GiB"), std::string::npos) << d.reason;
}

TEST(Scheduler, PriorityThenArrivalOrdersTheQueue) {
  Scheduler s = make();
  s.registerServer(server("a", 1), 0);
  s.request(req("holder"), 0, "H");
  s.request(req("low1"), 1, "A");
  auto hi = req("hi");
  hi.priority = "high";
  s.request(hi, 2, "B");
  s.request(req("low2"), 3, "C");
  EXPECT_EQ(s.position("B"), 1);
  EXPECT_EQ(s.position("A"), 2);
  EXPECT_EQ(s.position("C"), 3);
  s.end("H", "released", 4);
  EXPECT_EQ(s.lease("B")->state, LeaseState::kGranted);
  EXPECT_EQ(s.lease("A")->state, LeaseState::kQueued);
}

TEST(Scheduler, QuotaHoldsAUserBackWithoutBlockingOthers) {
  Scheduler s = make("[quotas.users.alice]\ngpus = 1\n");
  s.registerServer(server("a", 3), 0);
  ASSERT_EQ(s.request(req("alice"), 0, "A1").kind, Decision::kGranted);
  auto d = s.request(req("alice"), 1, "A2");
  EXPECT_EQ(d.kind, Decision::kQueued);
  EXPECT_NE(d.reason.find("quota: user 'alice' holds 1 of 1 GPUs"), std::string::npos) << d.reason;
  EXPECT_EQ(s.request(req("bob"), 2, "B1").kind, Decision::kGranted);  // not held behind alice
  s.end("A1", "released", 3);
  EXPECT_EQ(s.lease("A2")->state, LeaseState::kGranted);
}

TEST(Scheduler, HeartbeatsEndLeasesAndServers) {
  Scheduler s = make("[settings]\nlease_ttl = \"1s\"\nserver_timeout = \"2s\"\n");
  s.registerServer(server("a", 1), 0);
  s.registerServer(server("b", 1), 0);
  s.request(req("u"), 0, "L1");  // packs onto a
  s.request(req("v"), 0, "L2");  // then b
  std::string on_b = s.lease("L1")->shares[0].server == "b" ? "L1" : "L2";
  std::string on_a = on_b == "L1" ? "L2" : "L1";
  s.heartbeatLease(on_a, 900);
  s.tick(1500);  // on_b missed its heartbeat
  EXPECT_EQ(s.lease(on_b)->state, LeaseState::kEnded);
  EXPECT_NE(s.lease(on_b)->end_reason.find("expired: no heartbeat"), std::string::npos);
  std::vector<std::string> revoked;
  ASSERT_TRUE(s.heartbeatServer(s.lease(on_b)->shares[0].server, 1600, {on_b}, revoked));  // still serving it
  EXPECT_EQ(revoked, std::vector<std::string>{on_b});
  s.heartbeatLease(on_a, 1800);
  s.heartbeatServer(s.lease(on_b)->shares[0].server, 1800, {}, revoked);
  EXPECT_TRUE(revoked.empty());
  s.tick(2600);  // the server of on_a has been silent since 0
  EXPECT_EQ(s.lease(on_a)->state, LeaseState::kEnded);
  EXPECT_NE(s.lease(on_a)->end_reason.find("stopped heartbeating"), std::string::npos);
  EXPECT_FALSE(s.servers().at(s.lease(on_a)->shares[0].server).up);
  EXPECT_EQ(s.request(req("w"), 2600, "L3").kind, Decision::kGranted);  // on the live server only
  EXPECT_NE(s.lease("L3")->shares[0].server, s.lease(on_a)->shares[0].server);
}

TEST(Scheduler, ARevokedShareDrainsUntilItsServerStopsServingIt) {
  Scheduler s = make("[settings]\nlease_ttl = \"1s\"\n");
  s.registerServer(server("a", 1), 0);
  s.request(req("u"), 0, "L1");
  std::vector<std::string> revoked;
  s.heartbeatServer("a", 100, {"L1"}, revoked);  // a worker of L1 runs on a
  s.tick(1500);                                   // L1 expired
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kEnded);
  // Its worker may still run: the GPU is not offered again, and the revocation is sent again in every
  // answer (a lost answer loses nothing) until the server reports the worker gone.
  EXPECT_EQ(s.request(req("v", 1.0, 1, 60000), 1500, "L2").kind, Decision::kQueued);
  for (int64_t t : {1600, 1700}) {
    s.heartbeatServer("a", t, {"L1"}, revoked);
    EXPECT_EQ(revoked, std::vector<std::string>{"L1"});
    EXPECT_EQ(s.lease("L2")->state, LeaseState::kQueued);
  }
  s.heartbeatServer("a", 1800, {}, revoked);
  EXPECT_TRUE(revoked.empty());
  EXPECT_EQ(s.lease("L2")->state, LeaseState::kGranted);
  // A lease its server never reported serving is free at once; one whose last client left, too.
  s.heartbeatServer("a", 1900, {"L2"}, revoked);
  EXPECT_TRUE(s.clientLeft("a", "L2", 1950));
  EXPECT_EQ(s.request(req("w"), 1950, "L3").kind, Decision::kGranted);
}

// A lease gpool run holds outlives each of its command's processes (`sh -c "prog1; prog2"`): only one taken
// through the API alone ends when its last client leaves.
TEST(Scheduler, ALeaseHeldForACommandOutlivesItsClientProcesses) {
  Scheduler s = make();
  s.registerServer(server("a", 1), 0);
  LeaseRequest held = req("u", 0.5);
  held.ends_with_clients = false;
  s.request(held, 0, "L1");
  s.request(req("v", 0.5), 0, "L2");
  std::vector<std::string> revoked;
  s.heartbeatServer("a", 100, {"L1", "L2"}, revoked);
  EXPECT_FALSE(s.clientLeft("a", "L1", 200));
  EXPECT_EQ(s.lease("L1")->state, LeaseState::kGranted);
  EXPECT_TRUE(s.clientLeft("a", "L2", 200));
  EXPECT_EQ(s.lease("L2")->state, LeaseState::kEnded);
  EXPECT_EQ(s.request(req("w"), 300, "L3").kind, Decision::kQueued);  // L1 still holds its half
}

// A command may start a CUDA process long after its grant: the tokens its holder's heartbeats bring back
// are renewed once half their life has passed, and the heartbeats come often enough for that.
TEST(Scheduler, HeartbeatsRenewALeasesTokensOnceHalfTheirLifeHasPassed) {
  int64_t clock_s = 1000, signed_with = 0;
  Scheduler s(parsePolicy("[settings]\ntoken_ttl = \"60s\"\nlease_ttl = \"1h\"\n"),
              [&](const Lease& l, const Share& sh, int, int64_t expiry) {
                signed_with = expiry;
                return "tok-" + l.id + "-" + sh.server + "-" + std::to_string(expiry);
              },
              [&] { return clock_s; });
  EXPECT_EQ(s.policy().leaseHeartbeat(), std::chrono::seconds(15));  // a quarter of token_ttl, shorter than lease_ttl / 3
  s.registerServer(server("a", 1), 0);
  s.request(req("u"), 0, "L1");
  const std::string first = s.lease("L1")->shares[0].token;
  EXPECT_EQ(s.lease("L1")->token_expiry_s, 1060);
  clock_s = 1029;
  EXPECT_FALSE(s.renewTokens("L1"));  // 31 s left of 60
  EXPECT_EQ(s.lease("L1")->shares[0].token, first);
  clock_s = 1030;
  EXPECT_TRUE(s.renewTokens("L1"));
  EXPECT_EQ(s.lease("L1")->token_expiry_s, 1090);
  EXPECT_EQ(signed_with, 1090);
  EXPECT_NE(s.lease("L1")->shares[0].token, first);
  EXPECT_FALSE(s.renewTokens("L1"));
  s.request(req("v"), 0, "L2");  // queued: no tokens to renew
  EXPECT_FALSE(s.renewTokens("L2"));
  s.end("L1", "released", 0);
  clock_s = 5000;
  EXPECT_FALSE(s.renewTokens("L1"));  // an ended lease gets none
}

// Issue 11: a restarted allocator forgot the shares still draining on a server and granted them again
// while the ended lease's worker ran on. Now it grants nothing on a server until the server has said
// which leases it serves, and counts the ended ones among them until they stop.
TEST(Scheduler, ARestartedAllocatorCountsWhatStillDrainsBeforeGrantingOnAServer) {
  Scheduler s = make();
  s.registerServer(server("a", 1), 0);
  ASSERT_EQ(s.request(req("u1", 1.0), 0, "L1").kind, Decision::kGranted);
  std::vector<std::string> revoked;
  s.heartbeatServer("a", 50, {"L1"}, revoked);
  s.end("L1", "released", 60);  // its worker still runs: the GPU drains

  Scheduler r = make();  // the allocator restarts from what it stored
  r.restore(s.servers(), s.leases(), 100);
  EXPECT_EQ(r.request(req("u2", 1.0), 100, "L2").kind, Decision::kQueued) << "granted before server a reported";
  r.heartbeatServer("a", 200, {"L1"}, revoked);
  EXPECT_EQ(revoked, std::vector<std::string>{"L1"});
  EXPECT_EQ(r.lease("L2")->state, LeaseState::kQueued) << "granted the GPU an ended lease's worker still uses";
  r.heartbeatServer("a", 300, {}, revoked);  // the worker is gone
  EXPECT_TRUE(revoked.empty());
  EXPECT_EQ(r.lease("L2")->state, LeaseState::kGranted);
}

// Issue 12: a gang of shares lands on as few servers as it can. Packing alone took the fullest GPUs
// first, wherever they were, and split requests that fewer servers fit.
namespace {
// Grants a share of `p` on `on` only, by draining the other servers meanwhile.
void grantOn(Scheduler& s, const std::string& on, const std::string& id, double p) {
  for (const auto& [name, _] : s.servers()) s.setDrain(name, name != on);
  ASSERT_EQ(s.request(req("u-" + id, p), 0, id).kind, Decision::kGranted);
  ASSERT_EQ(s.lease(id)->shares[0].server, on);
  for (const auto& [name, _] : s.servers()) s.setDrain(name, false);
}
std::set<std::string> serversOf(const Scheduler& s, const std::string& id) {
  std::set<std::string> out;
  for (const auto& sh : s.lease(id)->shares) out.insert(sh.server);
  return out;
}
}  // namespace

TEST(Scheduler, AGangLandsOnOneServerWhenOneFitsIt) {
  Scheduler s = make();
  s.registerServer(server("a", 2), 0);
  s.registerServer(server("b", 2), 0);
  grantOn(s, "b", "whole", 1.0);  // b: one GPU full,
  grantOn(s, "b", "half", 0.5);   // the other half used: the fullest GPU that fits a half
  auto d = s.request(req("u", 0.5, 2), 1, "gang");
  ASSERT_EQ(d.kind, Decision::kGranted) << d.reason;
  EXPECT_EQ(serversOf(s, "gang"), std::set<std::string>{"a"}) << "split over two servers when a fits both";
}

TEST(Scheduler, AGangTooBigForOneServerTakesTheFewestServers) {
  Scheduler s = make();
  for (const char* name : {"a", "b", "c"}) s.registerServer(server(name, 2), 0);
  for (const char* name : {"a", "b", "c"}) grantOn(s, name, std::string("whole-") + name, 1.0);  // one GPU of each used
  auto d = s.request(req("u", 0.5, 3), 1, "gang");
  ASSERT_EQ(d.kind, Decision::kGranted) << d.reason;
  EXPECT_EQ(serversOf(s, "gang").size(), 2u) << "three halves need two of these servers, not three";
}

TEST(Scheduler, DrainStopsNewSharesAndAWaitRunsOut) {
  Scheduler s = make();
  s.registerServer(server("a", 1), 0);
  s.setDrain("a", true);
  auto d = s.request(req("u", 1.0, 1, 500), 0, "L");
  EXPECT_EQ(d.kind, Decision::kQueued);
  s.tick(600);
  EXPECT_EQ(s.lease("L")->state, LeaseState::kEnded);
  EXPECT_NE(s.lease("L")->end_reason.find("the wait ran out"), std::string::npos);
  auto now = s.request(req("u", 1.0, 1, 0), 700, "M");  // no wait at all
  EXPECT_EQ(now.kind, Decision::kRefused);
  EXPECT_NE(now.reason.find("no --wait"), std::string::npos);
}

TEST(Policy, BadFilesGiveClearErrors) {
  auto err = fixtures::policyError;
  EXPECT_NE(err("[pools.a\n").find("TOML syntax error at line 1"), std::string::npos);
  EXPECT_NE(err("[pools.a]\nfractions = [1.5]\n").find("pools.a.fractions: 1.5"), std::string::npos);
  EXPECT_NE(err("[pools.a]\nisolation = \"loose\"\n").find("pools.a.isolation must be one of exclusive, process, spatial (not 'loose')"), std::string::npos);
  EXPECT_NE(err("[pools.a]\nisolation = \"exclusive\"\nfractions = [0.5]\n").find("whole GPUs only"), std::string::npos);
  EXPECT_NE(err("[settings]\nlease_ttl = \"soon\"\n").find("settings.lease_ttl"), std::string::npos);
  EXPECT_NE(err("[quotas.users.x]\nmemory = \"12 parsecs\"\n").find("quotas.users.x.memory"), std::string::npos);
  EXPECT_NE(err("[colour]\n").find("unknown key 'colour'"), std::string::npos);
  EXPECT_NE(err("[pools.a]\nservers = [\"s1\"]\n[pools.b]\nservers = [\"s1\"]\n").find("more than one pool"), std::string::npos);
  Policy p = parsePolicy(
      "[settings]\nlease_ttl = \"3s\"\n[pools.train]\nservers = [\"gpu1\"]\nfractions = [1]\nisolation = \"exclusive\"\n"
      "[pools.dev]\nservers = [\"*\"]\nfractions = [0.5, 0.25]\nplacement = \"spread\"\n[quotas.groups.ml]\nmemory = \"80GiB\"\n");
  EXPECT_EQ(p.lease_ttl.count(), 3000);
  EXPECT_EQ(p.poolOfServer("gpu1")->name, "train");
  EXPECT_EQ(p.poolOfServer("gpu9")->name, "dev");
  EXPECT_EQ(*p.group_quotas.at("ml").memory, 80 * kGiB);
  EXPECT_TRUE(p.notes.empty()) << p.notes.front();
  Policy spatial = parsePolicy("[pools.a]\nisolation = \"spatial\"\nfractions = [0.5]\n");
  ASSERT_EQ(spatial.notes.size(), 1u) << "a setting that is taken but not enforced is said";
  EXPECT_NE(spatial.notes[0].find("pools.a.isolation = \"spatial\": SM partitions are not built yet"), std::string::npos);
  EXPECT_EQ(parseSize("1.5GB"), 1500000000u);
  EXPECT_THROW(parseSize("-3GiB"), UnitError);
  EXPECT_THROW(parseDuration("."), UnitError);  // found by fuzz_policy: std::stod's own exception escaped
  EXPECT_THROW(parseDuration("..s"), UnitError);
  EXPECT_THROW(parsePolicy("[settings]\nlease_ttl = \"5x\"\n"), PolicyError) << "a bad duration in a policy is a policy error";
  // Found by fuzz_policy: seconds that overflow milliseconds, and a float toml++ would convert unchecked.
  EXPECT_THROW(parsePolicy("[settings]\nlease_ttl = 777777777777777701\n"), PolicyError);
  EXPECT_THROW(parsePolicy("[settings]\nlease_ttl = 7.7e19\n"), PolicyError);
  EXPECT_THROW(parsePolicy("[quotas.users.a]\nmemory = 7.7e19\n"), PolicyError);
}

TEST(LeaseToken, VerifiesAndRefusesForgedExpiredAndMisdirected) {
  using gpool::token::Ed25519Key;
  Ed25519Key signer = Ed25519Key::generate(), other = Ed25519Key::generate();
  Ed25519Key key = Ed25519Key::fromPublicPem(signer.publicPem());  // what a GPU host holds
  std::string why;
  std::string t = gpool::token::sign({"L1", "gpu1", 2, 40 * kGiB, 0.5, 5000}, signer);
  EXPECT_THROW(gpool::token::sign({"L1", "gpu1", 2, 40 * kGiB, 0.5, 5000}, key), std::logic_error);  // it cannot mint
  auto c = gpool::token::check(t, key, "gpu1", 2, 4000, why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->memory, 40 * kGiB);
  EXPECT_FALSE(gpool::token::check(t, other, "gpu1", 2, 4000, why));
  EXPECT_NE(why.find("signature does not verify"), std::string::npos);
  std::string forged = t;
  forged[10] = forged[10] == 'a' ? 'b' : 'a';  // a changed claim
  EXPECT_FALSE(gpool::token::check(forged, key, "gpu1", 2, 4000, why));
  EXPECT_FALSE(gpool::token::check(t, key, "gpu1", 2, 6000, why));
  EXPECT_NE(why.find("expired"), std::string::npos);
  EXPECT_FALSE(gpool::token::check(t, key, "gpu2", 2, 4000, why));
  EXPECT_NE(why.find("names server 'gpu1'"), std::string::npos);
  EXPECT_FALSE(gpool::token::check(t, key, "gpu1", 0, 4000, why));
  EXPECT_FALSE(gpool::token::check("gpl1.zz.00", key, "gpu1", 0, 4000, why));
  EXPECT_FALSE(gpool::token::check(gpool::token::sign({"L1", "gpu1", 2, 40 * kGiB, 0.5, 5000}, other), key, "gpu1", 2, 4000, why));
  EXPECT_FALSE(gpool::token::check("", key, "gpu1", 0, 4000, why));
}

// Two shares of one lease on one GPU differ only in their number, which the server keys their memory and
// time by; a token signed before shares were numbered is share 0; a number out of range is refused.
TEST(LeaseToken, NumbersTheLeasesShares) {
  using gpool::token::Ed25519Key;
  Ed25519Key signer = Ed25519Key::generate();
  Ed25519Key key = Ed25519Key::fromPublicPem(signer.publicPem());
  std::string why;
  auto c = gpool::token::check(gpool::token::sign({"L1", "gpu1", 2, kGiB, 0.5, 5000, 7}, signer), key, "gpu1", 2, 4000, why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->share, 7);
  auto raw = [&](const std::string& payload) {
    return "gpl2." + gpool::token::hex(reinterpret_cast<const unsigned char*>(payload.data()), payload.size()) + "." +
           signer.sign(payload);
  };
  c = gpool::token::check(raw("L1|gpu1|2|1073741824|0.5|5000"), key, "gpu1", 2, 4000, why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->share, 0);
  for (const char* bad : {"L1|gpu1|2|1073741824|0.5|5000|-1", "L1|gpu1|2|1073741824|0.5|5000|1024",
                          "L1|gpu1|2|1073741824|0.5|5000|x", "L1|gpu1|2|1073741824|0.5|5000|0|0",
                          "L1|gpu1|2|1073741824|0.5|5000|0|zz", "L1|gpu1|2|1073741824|0.5|5000|0|61|62"}) {
    EXPECT_FALSE(gpool::token::check(raw(bad), key, "gpu1", 2, 4000, why)) << bad;
    EXPECT_EQ(why, "malformed lease token claims") << bad;
  }
}

// A token names the user its lease is for, whatever bytes the name holds (a server keeps each user's JIT
// cache apart by it); a token from an allocator before users were named names none.
TEST(LeaseToken, NamesTheLeasesUser) {
  using gpool::token::Ed25519Key;
  Ed25519Key signer = Ed25519Key::generate();
  Ed25519Key key = Ed25519Key::fromPublicPem(signer.publicPem());
  std::string why;
  for (std::string user : {std::string("alice"), std::string("a|b"), std::string("../x\n"), std::string("z\0y", 3)}) {
    auto c = gpool::token::check(gpool::token::sign({"L1", "gpu1", 2, kGiB, 0.5, 5000, 3, user}, signer), key, "gpu1", 2, 4000, why);
    ASSERT_TRUE(c) << why;
    EXPECT_EQ(c->user, user);
    EXPECT_EQ(c->share, 3);
  }
  auto c = gpool::token::check(gpool::token::sign({"L1", "gpu1", 2, kGiB, 0.5, 5000}, signer), key, "gpu1", 2, 4000, why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->user, "");
  std::string payload = "L1|gpu1|2|1073741824|0.5|5000|1";  // (an allocator's before users were named)
  c = gpool::token::check("gpl2." + gpool::token::hex(reinterpret_cast<const unsigned char*>(payload.data()), payload.size()) +
                              "." + signer.sign(payload),
                          key, "gpu1", 2, 4000, why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->user, "");
  EXPECT_EQ(c->share, 1);
}

TEST(Scheduler, SignsEachShareWithItsNumberInTheLease) {
  std::vector<int> numbers;
  Scheduler s(parsePolicy("[pools.default]\nfractions = [1, 0.5]\n"),
              [&](const Lease& l, const Share&, int index, int64_t) {
                numbers.push_back(index);
                return "tok-" + l.id + "-" + std::to_string(index);
              },
              [] { return int64_t{1000}; });
  s.registerServer(server("a", 1), 0);
  s.request(req("u", 0.5, 2), 0, "L1");
  const Lease* l = s.lease("L1");
  ASSERT_EQ(l->shares.size(), 2u);
  EXPECT_EQ(l->shares[0].device, l->shares[1].device);  // two halves of one GPU
  EXPECT_EQ(l->shares[0].token, "tok-L1-0");
  EXPECT_EQ(l->shares[1].token, "tok-L1-1");
  EXPECT_EQ(numbers, (std::vector<int>{0, 1}));
}

TEST(Store, KeepsServersLeasesAndPolicyAcrossReopening) {
  fs::path db = fs::temp_directory_path() / ("gpool-store-test-" + std::to_string(::getpid()) + ".db");
  fs::remove(db);
  {
    Scheduler s = make();
    s.registerServer(server("a", 2), 0);
    s.request(req("u", 0.5), 0, "L1");
    s.request(req("v", 1.0, 2), 0, "L2");  // queued
    SqliteStore st(db.string());
    std::string policy = "[pools.default]\nfractions = [1, 0.5]\n";
    st.save(s, s.takeDirtyServers(), s.takeDirtyLeases(), &policy);
  }
  SqliteStore st(db.string());
  EXPECT_EQ(*st.policyText(), "[pools.default]\nfractions = [1, 0.5]\n");
  auto servers = st.servers();
  auto leases = st.leases(false);
  ASSERT_EQ(servers.size(), 1u);
  ASSERT_EQ(leases.size(), 2u);
  EXPECT_EQ(leases.at("L1").state, LeaseState::kGranted);
  EXPECT_EQ(leases.at("L1").shares.at(0).token, "tok-L1-a");
  Scheduler s = make();
  s.restore(servers, leases, 100);
  EXPECT_EQ(s.position("L2"), 1);
  std::vector<std::string> revoked;
  s.heartbeatServer("a", 150, {"L1"}, revoked);  // its worker of L1 runs on
  s.end("L1", "released", 200);
  s.heartbeatServer("a", 250, {}, revoked);  // and stops: the restored usage is released and the queue moves
  EXPECT_EQ(s.lease("L2")->state, LeaseState::kGranted);
  fs::remove(db);
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
}

// Ended leases leave the database once the policy's retention period has passed since they ended, by
// the wall clock (the allocator's monotonic clock starts again at every boot).
TEST(Store, ForgetsEndedLeasesAfterTheRetentionPeriod) {
  fs::path db = fs::temp_directory_path() / ("gpool-store-retention-" + std::to_string(::getpid()) + ".db");
  fs::remove(db);
  {
    int64_t wall_s = 1000;
    Scheduler s(parsePolicy("[settings]\nended_lease_retention = \"1h\"\n"),
                [](const Lease& l, const Share& sh, int, int64_t) { return "tok-" + l.id + "-" + sh.server; }, [&wall_s] { return wall_s; });
    EXPECT_EQ(s.policy().ended_lease_retention, std::chrono::hours(1));
    s.registerServer(server("a", 2), 0);
    s.request(req("u", 0.5), 0, "old");
    s.request(req("v", 0.5), 0, "recent");
    s.request(req("w", 0.5), 0, "live");
    s.end("old", "released", 10);  // at wall time 1000 s
    wall_s = 5000;
    s.end("recent", "released", 20);
    SqliteStore st(db.string());
    st.save(s, s.takeDirtyServers(), s.takeDirtyLeases());
    EXPECT_EQ(st.leases(true).size(), 3u);
    EXPECT_EQ(st.forgetEndedBefore(1000), 0);  // nothing ended before 1000 s
    EXPECT_EQ(st.forgetEndedBefore(4600), 1);  // at 8200 s with a 1 h retention: "old" goes
    auto left = st.leases(true);
    EXPECT_EQ(left.count("old"), 0u);
    EXPECT_EQ(left.count("recent"), 1u);
    EXPECT_EQ(left.count("live"), 1u);  // live leases are never forgotten
  }
  fs::remove(db);
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
}

TEST(Policy, RetentionOfEndedLeasesIsADuration) {
  EXPECT_EQ(Policy().ended_lease_retention, std::chrono::hours(24 * 7));
  EXPECT_THROW(parsePolicy("[settings]\nended_lease_retention = \"soon\"\n"), PolicyError);
}

TEST(Scheduler, TwoHalvesOfOneRequestShareAGpuOnlyWhenDistinctGpusDoNotFit) {
  Scheduler s = make();
  s.registerServer(server("a", 2), 0);
  auto d = s.request(req("u", 0.5, 2), 1, "apart");
  ASSERT_EQ(d.kind, Decision::kGranted) << d.reason;
  const Lease* apart = &s.leases().at("apart");
  EXPECT_NE(apart->shares[0].device, apart->shares[1].device) << "two free GPUs: one half on each";

  Scheduler one = make();
  one.registerServer(server("a", 1), 0);
  one.registerServer(server("b", 1), 0);
  auto both = one.request(req("u", 0.5, 2), 1, "both");
  ASSERT_EQ(both.kind, Decision::kGranted) << both.reason;
  EXPECT_EQ(serversOf(one, "both"), std::set<std::string>{"a"}) << "two halves of one GPU rather than two servers";
  auto three = one.request(req("u", 0.5, 3), 1, "three");
  EXPECT_EQ(three.kind, Decision::kQueued) << "one half is left: three halves wait";
  auto five = one.request(req("u", 0.5, 5), 1, "five");
  EXPECT_EQ(five.kind, Decision::kRefused);
  EXPECT_NE(five.reason.find("has 2 (4 shares of 0.5)"), std::string::npos) << five.reason;
}

TEST(Scheduler, QueuePositionsCountOnlyTheirPoolAndMoveUp) {
  Scheduler s = make("[pools.a]\nservers = [\"sa\"]\n[pools.b]\nservers = [\"sb\"]\n");
  s.registerServer(server("sa", 1), 0);
  s.registerServer(server("sb", 1), 0);
  auto in = [](const std::string& pool) {
    LeaseRequest r = req("u");
    r.pool = pool;
    return r;
  };
  ASSERT_EQ(s.request(in("a"), 0, "A0").kind, Decision::kGranted);
  ASSERT_EQ(s.request(in("b"), 0, "B0").kind, Decision::kGranted);
  for (int i = 1; i <= 5; ++i) {
    ASSERT_EQ(s.request(in("a"), i, "A" + std::to_string(i)).kind, Decision::kQueued);
    ASSERT_EQ(s.request(in("b"), i, "B" + std::to_string(i)).kind, Decision::kQueued);
  }
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(s.position("A" + std::to_string(i)), i);
    EXPECT_EQ(s.position("B" + std::to_string(i)), i);
  }
  EXPECT_TRUE(s.end("A2", "cancelled", 6));
  EXPECT_TRUE(s.end("B0", "released", 6));  // B1 is granted
  EXPECT_EQ(s.position("A1"), 1);
  EXPECT_EQ(s.position("A3"), 2);
  EXPECT_EQ(s.position("A5"), 4);
  EXPECT_EQ(s.position("B1"), 0);  // not queued
  EXPECT_EQ(s.position("B2"), 1);
  EXPECT_EQ(s.position("B5"), 4);
}

TEST(Scheduler, ATickThatFreesMuchRoomGrantsItInShortPasses) {
  Scheduler s = make("[settings]\nlease_ttl = \"1s\"\n");
  s.registerServer(server("a", 40), 0);
  for (int i = 0; i < 40; ++i) ASSERT_EQ(s.request(req("u"), 0, "U" + std::to_string(i)).kind, Decision::kGranted);
  for (int i = 0; i < 40; ++i) ASSERT_EQ(s.request(req("v"), 0, "V" + std::to_string(i)).kind, Decision::kQueued);
  for (int i = 0; i < 40; ++i) s.heartbeatLease("V" + std::to_string(i), 900);
  std::vector<std::string> revoked;
  s.heartbeatServer("a", 900, {}, revoked);
  auto granted = [&] {
    int n = 0;
    for (int i = 0; i < 40; ++i) n += s.lease("V" + std::to_string(i))->state == LeaseState::kGranted;
    return n;
  };
  s.tick(1500);  // every U lease expires at once: room for all 40
  EXPECT_EQ(granted(), Scheduler::kGrantsPerPass);
  EXPECT_TRUE(s.moreToGrant());
  int passes = 1;
  while (s.moreToGrant() && passes < 10) s.grantMore(1500), ++passes;
  EXPECT_EQ(granted(), 40);
  EXPECT_EQ(passes, (40 + Scheduler::kGrantsPerPass - 1) / Scheduler::kGrantsPerPass);
  EXPECT_EQ(s.queued(), 0u);
  EXPECT_EQ(s.lease("V0")->granted_ms, 1500);
}
