// The lease record (model_json.cpp): what a store keeps of a notice comes back the same, and records
// kept before the notice's kind was stored get it from their text.
#include <gtest/gtest.h>

#include "model_json.h"

namespace gpool::allocator {
namespace {

Lease withNotice(Notice kind, const std::string& for_request) {
  Lease l;
  l.id = "L1";
  l.state = LeaseState::kGranted;
  l.preempt_at_ms = 5000;
  l.notice = kind;
  l.preempted_for = for_request;
  return l;
}

TEST(LeaseRecord, KeepsTheKindOfItsNotice) {
  for (auto [kind, text] : {std::pair{Notice::kPreemption, "L2"}, std::pair{Notice::kMove, "move to V100"},
                            std::pair{Notice::kRound, "round: other jobs' turn"}}) {
    Lease back = leaseFromJson(toJson(withNotice(kind, text), LeaseView::kRecord));
    EXPECT_EQ(back.notice, kind) << text;
    EXPECT_EQ(back.preempted_for, text);
  }
  Lease none = withNotice(Notice::kNone, "");
  none.preempt_at_ms = 0;  // no notice
  EXPECT_EQ(leaseFromJson(toJson(none, LeaseView::kRecord)).notice, Notice::kNone);
}

TEST(LeaseRecord, AnOlderRecordGetsTheKindFromItsText) {
  for (auto [kind, text] : {std::pair{Notice::kPreemption, "L2"}, std::pair{Notice::kMove, "move to V100"},
                            std::pair{Notice::kRound, "round: it moves to K80"}}) {
    auto j = toJson(withNotice(kind, text), LeaseView::kRecord);
    j.erase("notice");
    EXPECT_EQ(leaseFromJson(j).notice, kind) << text;
  }
}

}  // namespace
}  // namespace gpool::allocator
