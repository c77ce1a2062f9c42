// Which leases gpool-server serves: only those the allocator's latest answer lists as live on it.
#include <gtest/gtest.h>

#include "lease_gate.h"

using gpool::server::LeaseGate;

namespace {
struct Outcome {
  bool decided = false, live = false;
  std::string why;
  LeaseGate::Verdict verdict() {
    return [this](bool ok, const std::string& reason) {
      decided = true;
      live = ok;
      why = reason;
    };
  }
};
}  // namespace

TEST(LeaseGate, ServesOnlyWhatTheLatestAnswerListsAsLive) {
  LeaseGate gate;
  EXPECT_TRUE(gate.update({"a", "b"}, 1).empty());
  Outcome a;
  EXPECT_EQ(gate.admit("a", 2, a.verdict()), 0u);  // listed: at once
  EXPECT_TRUE(a.decided && a.live);
  EXPECT_EQ(gate.update({"b"}, 2), std::vector<std::string>{"a"});  // a ended: its workers stop
  Outcome again;
  gate.admit("a", 3, again.verdict());
  EXPECT_FALSE(again.decided);  // waits for an answer given after it arrived
  gate.update({"b"}, 3);
  EXPECT_TRUE(again.decided && !again.live);
  EXPECT_NE(again.why.find("has ended"), std::string::npos);
}

// A lease granted a moment ago may be missing from an answer to a request sent before the client came:
// only an answer to a later request can refuse it.
TEST(LeaseGate, AnAnswerFromBeforeTheClientCameDecidesNothingAgainstIt) {
  LeaseGate gate;
  Outcome fresh;
  uint64_t ticket = gate.admit("new", 5, fresh.verdict());  // refresh() said: request 5 onwards
  EXPECT_NE(ticket, 0u);
  gate.update({"old"}, 4);  // in flight when the client came
  EXPECT_FALSE(fresh.decided);
  gate.update({"old", "new"}, 5);
  EXPECT_TRUE(fresh.decided && fresh.live);
}

TEST(LeaseGate, AClientTheAllocatorNeverConfirmsIsRefusedWhenItsTimeRunsOut) {
  LeaseGate gate;
  Outcome waiting, other;
  uint64_t ticket = gate.admit("x", 1, waiting.verdict());
  gate.admit("y", 1, other.verdict());
  gate.expire(ticket);
  EXPECT_TRUE(waiting.decided && !waiting.live);
  EXPECT_NE(waiting.why.find("did not confirm"), std::string::npos);
  EXPECT_FALSE(other.decided);
  gate.expire(ticket);  // settled already: nothing
}
