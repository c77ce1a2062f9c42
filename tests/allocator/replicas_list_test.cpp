// How clients follow allocator replicas (allocator_connection.h): the list they are given, and the
// leaders standbys name.
#include <gtest/gtest.h>

#include <stdexcept>

#include "gpool/allocator/allocator_connection.h"

namespace gpool::token {
namespace {

TEST(AllocatorReplicas, ReadsACommaSeparatedListAndRefusesWhatIsNotAnAllocatorUrl) {
  AllocatorReplicas r("http://a:1/,,http://b:2", "", 5);
  EXPECT_EQ(r.size(), 2u);
  EXPECT_EQ(r.all(), "http://a:1,http://b:2");
  EXPECT_THROW(AllocatorReplicas("http://a:1,ftp://b:2", "", 5), std::invalid_argument);
  EXPECT_THROW(AllocatorReplicas(",", "", 5), std::invalid_argument);
}

TEST(AllocatorReplicas, FollowsTheLeaderAStandbyNamesThenTriesEachReplicaOncePerRound) {
  AllocatorReplicas r("http://a:1,http://b:2,http://c:3", "", 5);
  r.startRound();
  EXPECT_TRUE(r.next("http://c:3"));  // a standby named c
  EXPECT_EQ(r.url(), "http://c:3");
  EXPECT_TRUE(r.next(""));  // c does not answer: the one not asked yet
  EXPECT_EQ(r.url(), "http://b:2");
  EXPECT_FALSE(r.next("http://a:1"));  // b stands by for a, asked already: every replica was asked this round
  r.startRound();
  EXPECT_TRUE(r.next("http://d:4"));  // a leader not in the list is followed, and kept
  EXPECT_EQ(r.url(), "http://d:4");
  EXPECT_EQ(r.size(), 4u);
}

TEST(AllocatorReplicas, ALeaderNamedOverHttpsIsNotFollowedOverHttp) {
  AllocatorReplicas r("https://a:1,https://b:2", "", 5);
  r.startRound();
  EXPECT_TRUE(r.next("http://a:1"));  // a downgrade: the next listed replica instead
  EXPECT_EQ(r.url(), "https://b:2");
  EXPECT_EQ(r.size(), 2u);
  EXPECT_TRUE(r.next("https://c:3"));
  EXPECT_EQ(r.url(), "https://c:3");
}

}  // namespace
}  // namespace gpool::token
