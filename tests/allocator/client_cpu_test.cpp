// Each client's share of gpool-allocator's CPU (allocator/src/client_cpu.h): what it saves, what it owes,
// and when its requests may go on again.
#include "client_cpu.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpool::allocator {
namespace {

using Clock = ClientCpu::Clock;
using std::chrono::milliseconds;
constexpr int64_t kMs = 1'000'000;  // ns

TEST(ClientCpu, AClientSpendsWhatItSavedAndThenWaitsForItsShareToPayWhatItOwes) {
  ClientCpu cpu(0.25);  // a quarter of a CPU: it saves up to 1 s of CPU
  auto t = Clock::now();
  EXPECT_TRUE(cpu.allows("10.0.0.66", t));
  int64_t r = cpu.reserve("10.0.0.66", t);
  EXPECT_EQ(r, 0);  // nothing known yet of what its requests cost
  cpu.settle("10.0.0.66", r, 1500 * kMs, t);  // one request cost 1.5 s: it owes 0.5 s
  EXPECT_FALSE(cpu.allows("10.0.0.66", t));
  EXPECT_TRUE(cpu.allows("10.0.0.1", t));  // another client is not held back by it
  // 0.5 s owed at a quarter of a second per second: paid off 2 s later.
  auto clears = cpu.clearsAt("10.0.0.66", t);
  EXPECT_NEAR(std::chrono::duration<double>(clears - t).count(), 2.0, 1e-6);
  EXPECT_FALSE(cpu.allows("10.0.0.66", t + milliseconds(1990)));
  EXPECT_TRUE(cpu.allows("10.0.0.66", clears));
}

TEST(ClientCpu, RequestsGoneTogetherEachReserveWhatTheClientsRequestsUsuallyCost) {
  ClientCpu cpu(0.5);  // saves up to 2 s
  auto t = Clock::now();
  for (int i = 0; i < 20; ++i) cpu.settle("c", cpu.reserve("c", t), 100 * kMs, t);  // 2 s spent: nothing left
  t += std::chrono::seconds(4);  // saved whole again
  int gone = 0;
  std::vector<int64_t> reserved;
  while (cpu.allows("c", t)) reserved.push_back(cpu.reserve("c", t)), ++gone;
  // Its requests cost close to 100 ms each lately: 2 s saved lets about 20 go at once, not any number.
  EXPECT_GE(gone, 18);
  EXPECT_LE(gone, 25);
  for (int64_t r : reserved) cpu.settle("c", r, 100 * kMs, t);
  EXPECT_FALSE(cpu.allows("c", t));
}

TEST(ClientCpu, WhatAClientSavesHasItsMost) {
  ClientCpu cpu(0.1);  // saves up to 0.4 s
  auto t = Clock::now();
  cpu.settle("c", cpu.reserve("c", t), 0, t);
  t += std::chrono::hours(1);  // an hour idle saves no more than 0.4 s
  cpu.settle("c", cpu.reserve("c", t), 450 * kMs, t);
  EXPECT_FALSE(cpu.allows("c", t));
  EXPECT_TRUE(cpu.allows("c", t + milliseconds(600)));
}

TEST(ClientCpu, ClientsThatSavedTheirWholeShareAreForgotten) {
  ClientCpu cpu(0.25);
  auto t = Clock::now();
  cpu.settle("a", cpu.reserve("a", t), 200 * kMs, t);
  int64_t held = cpu.reserve("b", t);  // b's request is being answered
  cpu.reserve("c", t);
  cpu.settle("c", 0, 0, t);
  EXPECT_EQ(cpu.clients(), 3u);
  cpu.forget(t + std::chrono::seconds(1));  // a saved 1 s again; b still has a request out
  EXPECT_EQ(cpu.clients(), 1u);
  cpu.settle("b", held, 0, t + std::chrono::seconds(1));
  cpu.forget(t + std::chrono::seconds(1));
  EXPECT_EQ(cpu.clients(), 0u);
}

TEST(ClientCpu, WhatTheGateSpentIsOwedButIsNotWhatRequestsUsuallyCost) {
  ClientCpu cpu(0.25);
  auto t = Clock::now();
  cpu.settle("c", cpu.reserve("c", t), 10 * kMs, t);  // its requests cost 10 ms (1.25 ms on average of 8)
  cpu.charge("c", 990 * kMs, t);                     // sending their answers' rests cost the gate the rest of 1 s
  EXPECT_TRUE(cpu.allows("c", t + std::chrono::microseconds(1)));  // (the 1 s it saved, spent to the last ns)
  cpu.charge("c", 1 * kMs, t);
  EXPECT_FALSE(cpu.allows("c", t));
  EXPECT_EQ(cpu.reserve("c", t + std::chrono::seconds(1)), 1250 * 1000);  // its requests' usual cost, unchanged
}

// Clients that asked at `t`, each with what it may save then (4 s of its share of all of them asking).
std::vector<std::string> asking(ClientCpu& cpu, const std::string& prefix, int n, Clock::time_point t) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(prefix + std::to_string(i));
  for (const auto& c : names) cpu.allows(c, t);
  return names;
}

void spend(ClientCpu& cpu, const std::string& client, int64_t ns, Clock::time_point t) {
  cpu.settle(client, cpu.reserve(client, t), ns, t);
}

double secondsUntilClear(ClientCpu& cpu, const std::string& client, Clock::time_point t) {
  return std::chrono::duration<double>(cpu.clearsAt(client, t) - t).count();
}

TEST(ClientCpu, ACrowdOfManyClientsSplitsTheTotal) {
  ClientCpu cpu(0.25, 1.0);  // up to 4 clients may have a quarter each; 40 have a fortieth
  auto t = Clock::now();
  auto crowd = asking(cpu, "10.0.1.", 40, t);  // each saved 4 s of a fortieth: 100 ms
  EXPECT_EQ(cpu.clients(), 40u);
  EXPECT_DOUBLE_EQ(cpu.shareNow(), 1.0 / 40);
  for (const auto& c : crowd) spend(cpu, c, 200 * kMs, t);  // each owes 100 ms
  // At a fortieth of a CPU, paid off 4 s later, not 0.4 s: the crowd's shares pay in 1 s of CPU each
  // second in all, not 10.
  EXPECT_NEAR(secondsUntilClear(cpu, crowd[7], t), 4.0, 1e-3);
  EXPECT_FALSE(cpu.allows(crowd[7], t + milliseconds(3900)));
  EXPECT_TRUE(cpu.allows(crowd[7], t + milliseconds(4010)));
}

TEST(ClientCpu, FewClientsEachHaveTheirWholeShareUnderTheTotal) {
  ClientCpu cpu(0.25, 1.0);
  auto t = Clock::now();
  auto few = asking(cpu, "10.0.2.", 3, t);  // each saved 1 s
  EXPECT_DOUBLE_EQ(cpu.shareNow(), 0.25);
  for (const auto& c : few) spend(cpu, c, 1100 * kMs, t);
  EXPECT_NEAR(secondsUntilClear(cpu, few[1], t), 0.4, 1e-3);  // 100 ms owed, at a quarter of a CPU
}

TEST(ClientCpu, WhatAClientMaySaveShrinksWithItsShare) {
  ClientCpu cpu(0.25, 1.0);
  auto t = Clock::now();
  asking(cpu, "10.0.3.", 99, t);
  // A new client, the hundredth asking, may save 4 s of a hundredth of a CPU (40 ms), not 1 s: a crowd
  // cannot save up more than 4 s of the total.
  spend(cpu, "10.0.3.200", 39 * kMs, t);
  EXPECT_TRUE(cpu.allows("10.0.3.200", t));
  cpu.charge("10.0.3.200", 2 * kMs, t);
  EXPECT_FALSE(cpu.allows("10.0.3.200", t));
}

TEST(ClientCpu, TheOthersShareGrowsOnceACrowdIsForgotten) {
  ClientCpu cpu(0.25, 1.0);
  auto t = Clock::now();
  auto crowd = asking(cpu, "10.0.4.", 39, t);
  cpu.allows("greedy", t);  // 40 asking: each saved 100 ms
  for (const auto& c : crowd) spend(cpu, c, 100 * kMs, t);
  spend(cpu, "greedy", 1100 * kMs, t);  // it owes 1 s
  // 4 s later the crowd saved its 100 ms again and is forgotten; the greedy one paid 100 ms of what it
  // owes, and now pays the rest, 0.9 s, alone, at a quarter of a CPU: 3.6 s more.
  t += std::chrono::seconds(4) + milliseconds(1);
  cpu.forget(t);
  EXPECT_EQ(cpu.clients(), 1u);
  EXPECT_DOUBLE_EQ(cpu.shareNow(), 0.25);
  EXPECT_NEAR(secondsUntilClear(cpu, "greedy", t), 3.6, 1e-3);
}

TEST(ClientCpu, ATotalThatIsNotSetSplitsNothing) {
  ClientCpu cpu(0.25);
  auto t = Clock::now();
  asking(cpu, "10.0.5.", 100, t);
  EXPECT_DOUBLE_EQ(cpu.shareNow(), 0.25);
}

TEST(ClientCpu, NoShareLimitsNothing) {
  ClientCpu cpu(0);
  auto t = Clock::now();
  cpu.settle("c", cpu.reserve("c", t), 100'000 * kMs, t);
  EXPECT_TRUE(cpu.allows("c", t));
  EXPECT_EQ(cpu.clearsAt("c", t), t);
  EXPECT_EQ(cpu.clients(), 0u);
}

}  // namespace
}  // namespace gpool::allocator
