// Which waiting connection gives its place to a new one (allocator/src/displacement_order.h).
#include "displacement_order.h"

#include <gtest/gtest.h>

namespace gpool::allocator {
namespace {

constexpr bool kIdle = false, kRequest = true;

TEST(DisplacementOrder, TheCrowdedClientGivesUpItsOwnConnections) {
  DisplacementOrder order;
  EXPECT_EQ(order.next(), std::nullopt);
  order.add(3, "10.0.0.1", {kRequest, 100});  // a newcomer's, waiting longest
  for (int fd = 10; fd < 14; ++fd) order.add(fd, "10.0.0.66", {kRequest, 200 + fd});
  EXPECT_EQ(order.next(), 10);  // the crowd's oldest, not the newcomer's
  for (int fd = 10; fd < 13; ++fd) order.remove(fd);
  EXPECT_EQ(order.next(), 3);  // one each: the one waiting longest
  order.remove(3);
  EXPECT_EQ(order.next(), 13);
  order.remove(13);
  EXPECT_EQ(order.next(), std::nullopt);
  EXPECT_EQ(order.size(), 0u);
}

TEST(DisplacementOrder, AnIdleConnectionGoesBeforeARequestOfItsClient) {
  DisplacementOrder order;
  order.add(5, "u", {kRequest, 100});
  order.add(6, "u", {kIdle, 300});
  EXPECT_EQ(order.next(), 6);
  order.add(6, "u", {kRequest, 400});  // added again (it came back): its new key replaces the old
  EXPECT_EQ(order.size(), 2u);
  EXPECT_EQ(order.next(), 5);
  order.remove(99);  // not here: nothing
  EXPECT_EQ(order.size(), 2u);
}

}  // namespace
}  // namespace gpool::allocator
