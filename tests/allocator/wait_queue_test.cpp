// The wait queue's grant order (allocator/src/wait_queue.h) against the order it stands for: all queued
// leases sorted by how far beyond its guarantee each would take its queue (for its weight), then priority,
// then arrival, sorted again after every grant. Random queues, sizes, priorities and pools.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>

#include "fair_share.h"
#include "scheduler.h"
#include "wait_queue.h"

using namespace gpool::allocator;

namespace {

Policy threeQueues() {
  return parsePolicy(R"(
[queues.a]
guarantee = { gpus = 4 }
weight = 1
members = ["a"]
[queues.b]
guarantee = { gpus = 2 }
weight = 3
members = ["b"]
[queues.c]
parent = "a"
guarantee = { gpus = 1 }
weight = 2
members = ["c"]
)");
}

// The reference: a stable sort of the priority order by rank.
std::vector<Lease*> sortedOrder(const WaitQueue& q, const FairShare& fair) {
  std::vector<Lease*> order;
  for (const auto& e : q.entries()) order.push_back(WaitQueue::leaseOf(e));
  if (!fair.active()) return order;
  std::stable_sort(order.begin(), order.end(), [&](const Lease* x, const Lease* y) {
    return fair.beyondGuarantee(x->queue, x->req.n * x->req.p) < fair.beyondGuarantee(y->queue, y->req.n * y->req.p);
  });
  return order;
}

struct Fixture {
  Policy policy = threeQueues();
  FairShare fair;
  std::deque<Lease> leases;
  WaitQueue q;
  std::mt19937 rng{42};

  explicit Fixture(bool queues) {
    if (queues) fair.reset(policy.queues);
  }
  void fill(int n) {
    const char* users[] = {"a", "b", "c", "nobody"};
    const double fractions[] = {1.0, 0.5, 0.25};
    for (int i = 0; i < n; ++i) {
      Lease& l = leases.emplace_back();
      l.id = "l" + std::to_string(i);
      l.seq = static_cast<uint64_t>(i + 1);
      l.priority = static_cast<int>(rng() % 3);
      l.req.user = users[rng() % 4];
      l.req.pool = rng() % 4 ? "default" : "other";
      l.req.n = 1 + static_cast<int>(rng() % 3);
      l.req.p = fractions[rng() % 3];
      l.queue = fair.queueOf(policy, l.req.user, {});
      q.add(l);
    }
  }
};

}  // namespace

TEST(GrantOrder, WithoutQueuesIsThePriorityOrder) {
  Fixture f(false);
  f.fill(200);
  WaitQueue::GrantOrder order(f.q, f.fair);
  std::vector<Lease*> got;
  while (Lease* l = order.next()) got.push_back(l);
  EXPECT_EQ(got, sortedOrder(f.q, f.fair));
  EXPECT_EQ(got.size(), 200u);
  EXPECT_EQ(f.q.queuedIn("default") + f.q.queuedIn("other"), 200);
}

TEST(GrantOrder, FollowsWhatQueuesHoldAsGrantsChangeIt) {
  Fixture f(true);
  f.fill(300);
  WaitQueue::GrantOrder order(f.q, f.fair);
  int step = 0;
  while (true) {
    std::vector<Lease*> expected = sortedOrder(f.q, f.fair);
    Lease* l = order.next();
    if (!l) {
      EXPECT_TRUE(expected.empty());
      break;
    }
    ASSERT_FALSE(expected.empty());
    ASSERT_EQ(l, expected.front()) << "step " << step << ": got " << l->id << ", a stable sort gives " << expected.front()->id;
    f.q.remove(*l);  // what the scheduler does with what it tried: granted (here every other one) or ended
    if (step++ % 2 == 0) {
      f.fair.charge(l->queue, l->req.n * l->req.p, 0, +1);
      order.regrade();
    }
  }
  EXPECT_EQ(f.q.size(), 0u);
  EXPECT_TRUE(f.q.pools().empty());
}

TEST(GrantOrder, LeasesItHasNotReachedStayWhenOthersLeave) {
  Fixture f(true);
  f.fill(50);
  WaitQueue::GrantOrder order(f.q, f.fair);
  std::vector<Lease*> seen;
  while (Lease* l = order.next()) {
    seen.push_back(l);
    if (seen.size() % 3 == 0) f.q.remove(*l);  // only the one returned leaves, as the scheduler does
  }
  EXPECT_EQ(seen.size(), 50u);
  EXPECT_EQ(f.q.size(), 50u - 50u / 3);
}

TEST(WaitQueue, PositionCountsTheLeasesOfItsPoolAhead) {
  Fixture f(false);
  f.fill(100);
  for (const auto& l : f.leases) {
    int ahead = 0;
    for (const auto& e : f.q.entries()) {
      const Lease* x = WaitQueue::leaseOf(e);
      if (x == &l) break;
      ahead += x->req.pool == l.req.pool;
    }
    EXPECT_EQ(f.q.position(l), ahead + 1) << l.id;
  }
  Lease stranger;
  stranger.seq = 999;
  EXPECT_EQ(f.q.position(stranger), 0);
}
