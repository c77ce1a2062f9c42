// Which answer is dropped when the answers not read yet pass their budget (allocator/src/unread_answers.h).
#include "unread_answers.h"

#include <gtest/gtest.h>

namespace gpool::allocator {
namespace {

TEST(UnreadAnswers, PastTheBudgetTheClientHoldingTheMostLosesItsOldest) {
  UnreadAnswers unread(100);
  unread.set(3, "10.0.0.1", 10, 60);  // a newcomer's large answer, held longest
  EXPECT_EQ(unread.over(), std::nullopt);
  unread.set(7, "10.0.0.66", 30, 40);  // a crowd's: 120 in all
  unread.set(8, "10.0.0.66", 20, 40);
  unread.set(9, "10.0.0.66", 40, 40);
  EXPECT_EQ(unread.held(), 180u);
  EXPECT_EQ(unread.over(), 8);  // the crowd's oldest, not the newcomer's
  unread.remove(8);
  EXPECT_EQ(unread.over(), 7);  // 140: the crowd still holds the most (80)
  unread.remove(7);
  EXPECT_EQ(unread.over(), std::nullopt);  // 100 fits
  EXPECT_EQ(unread.held(), 100u);
}

TEST(UnreadAnswers, WhatAConnectionHoldsIsReplacedAndNothingIsForgotten) {
  UnreadAnswers unread(10);
  unread.set(4, "u", 1, 50);
  unread.set(4, "u", 1, 5);  // its client read most of it
  EXPECT_EQ(unread.held(), 5u);
  EXPECT_EQ(unread.over(), std::nullopt);
  unread.set(5, "v", 2, 20);
  EXPECT_EQ(unread.over(), 5);
  unread.set(5, "v", 2, 0);  // read to its end: it holds nothing
  EXPECT_EQ(unread.holding(), std::vector<int>{4});
  unread.remove(4);
  unread.remove(99);  // not here: nothing
  EXPECT_EQ(unread.held(), 0u);
  EXPECT_TRUE(unread.holding().empty());
}

}  // namespace
}  // namespace gpool::allocator
