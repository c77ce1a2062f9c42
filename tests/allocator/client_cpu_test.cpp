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
