// The byte budget a lease's workers share (server/budget/shared_budget.h), as two processes see it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memory_ledger.h"
#include "shared_budget.h"

using gpool::budget::SharedBudget;

TEST(SharedBudget, HoldsAcrossProcessesAndTakesBackWhatADeadOneHeld) {
  auto server = SharedBudget::create(100);
  pid_t child = ::fork();
  if (child == 0) {  // a worker: maps the budget it inherited and holds 60 in slot 1
    auto worker = SharedBudget::adopt(::dup(server->fd()));
    _exit(worker->reserve(1, 60) ? 0 : 1);  // then dies without releasing
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(server->used(), 60u);
  EXPECT_FALSE(server->reserve(2, 50));  // 60 + 50 > 100
  EXPECT_TRUE(server->reserve(2, 40));
  EXPECT_EQ(server->heldBy(1), 60u);
  server->reclaim(1);  // the server saw the worker end
  EXPECT_EQ(server->used(), 40u);
  EXPECT_TRUE(server->reserve(3, 60));
  server->release(3, 1000);  // never more than the slot holds
  EXPECT_EQ(server->used(), 40u);
}

TEST(SharedBudget, RefusesDescriptorsThatAreNotBudgets) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EXPECT_THROW(SharedBudget::adopt(fds[0]), std::runtime_error);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(MemoryLedger, TwoWorkersOfALeaseShareItsCap) {
  auto budget = SharedBudget::create(1000);
  gpool::worker::MemoryLedger a(1000, {budget, nullptr, 0}), b(1000, {budget, nullptr, 1});
  EXPECT_EQ(a.reserve(700), gpool::proto::cu::kSuccess);
  EXPECT_EQ(b.reserve(700), gpool::proto::cu::kOutOfMemory);
  gpool::proto::MemView seen{1000, 1000};
  b.view(seen);
  EXPECT_EQ(seen.free, 300u);  // b sees what a holds
  a.clear();
  EXPECT_EQ(b.reserve(700), gpool::proto::cu::kSuccess);
}

TEST(MemoryLedger, SimDeviceMemoryHoldsAcrossEveryWorkerOfTheServer) {
  auto device = SharedBudget::create(1000);
  gpool::worker::MemoryLedger lease1(800, {SharedBudget::create(800), device, 0}), lease2(800, {SharedBudget::create(800), device, 1});
  EXPECT_EQ(lease1.reserve(600), gpool::proto::cu::kSuccess);
  EXPECT_EQ(lease2.reserve(600), gpool::proto::cu::kOutOfMemory);  // each within its cap, not within the device
  EXPECT_EQ(lease2.reserve(400), gpool::proto::cu::kSuccess);
  EXPECT_EQ(device->used(), 1000u);
}
