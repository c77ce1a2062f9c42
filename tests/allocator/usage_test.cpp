// Accounting (allocator/src/usage.h): GPU time per user and group in a window of wall-clock time.
#include "usage.h"

#include <gtest/gtest.h>

using namespace gpool::allocator;

namespace {

constexpr uint64_t kGiB = 1ull << 30;

Lease lease(const std::string& user, const std::string& group, std::vector<double> fractions, int64_t granted, int64_t ended) {
  Lease l;
  l.req.user = user;
  l.req.group = group;
  l.granted_unix_s = granted;
  l.state = ended ? LeaseState::kEnded : LeaseState::kGranted;
  l.ended_unix_s = ended;
  for (double f : fractions) l.shares.push_back(Share{"s", "a:1", "", "", 0, f, static_cast<uint64_t>(f * 80 * kGiB)});
  return l;
}

TEST(Usage, CountsEachSharesFractionForTheTimeHeldInTheWindow) {
  std::map<std::string, Lease> leases = {
      {"L1", lease("ann", "ml", {0.5}, 1000, 4600)},         // 3600 s at half a GPU
      {"L2", lease("ann", "ml", {1.0, 1.0}, 2000, 2360)},    // two GPUs for 360 s
      {"L3", lease("bob", "vision", {0.25}, 5000, 0)},       // live: up to now (8600)
      {"L4", lease("ann", "other", {1.0}, 100, 900)},        // before the window
      {"L5", lease("cid", "ml", {1.0}, 0, 0)},               // never granted (queued, then cancelled)
  };
  auto rows = usageBetween(leases, 1000, 10000, 8600);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].user, "ann");  // most GPU time first
  EXPECT_EQ(rows[0].group, "ml");
  EXPECT_EQ(rows[0].leases, 2);
  EXPECT_DOUBLE_EQ(rows[0].gpu_seconds, 0.5 * 3600 + 2 * 360);
  EXPECT_DOUBLE_EQ(rows[0].memory_gib_seconds, 40.0 * 3600 + 2 * 80.0 * 360);
  EXPECT_EQ(rows[1].user, "bob");
  EXPECT_DOUBLE_EQ(rows[1].gpu_seconds, 0.25 * 3600);
}

TEST(Usage, OnlyThePartOfALeaseInsideTheWindowCounts) {
  std::map<std::string, Lease> leases = {{"L1", lease("ann", "ml", {1.0}, 1000, 5000)}};
  auto rows = usageBetween(leases, 2000, 3000, 9999);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].gpu_seconds, 1000);
  EXPECT_TRUE(usageBetween(leases, 5001, 6000, 9999).empty());
  EXPECT_TRUE(usageBetween(leases, 0, 1000, 9999).empty());  // [from, to): granted at its end
}

TEST(Usage, OneUserInTwoGroupsIsTwoRows) {
  std::map<std::string, Lease> leases = {{"L1", lease("ann", "ml", {1.0}, 1, 10)}, {"L2", lease("ann", "vision", {1.0}, 1, 20)}};
  auto rows = usageBetween(leases, 0, 100, 100);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].group, "vision");
  EXPECT_EQ(rows[1].group, "ml");
}

}  // namespace
