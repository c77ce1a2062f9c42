// What one peer may hold of a daemon's connections (gpool/peer_connections.h), and who counts as one peer.
#include "gpool/peer_connections.h"

#include <gtest/gtest.h>

using gpool::PeerConnections;

TEST(PeerConnections, APeerHoldsItsShareAndNoMoreUntilOneGoes) {
  PeerConnections peers(2);
  EXPECT_TRUE(peers.admit("10.0.0.1"));
  EXPECT_TRUE(peers.admit("10.0.0.1"));
  EXPECT_FALSE(peers.admit("10.0.0.1"));
  EXPECT_TRUE(peers.admit("10.0.0.2"));  // another peer has a share of its own
  EXPECT_EQ(peers.refused.load(), 1u);
  peers.release("10.0.0.1");
  EXPECT_TRUE(peers.admit("10.0.0.1"));
  EXPECT_FALSE(peers.admit("10.0.0.1"));
  EXPECT_EQ(peers.refused.load(), 2u);
  peers.release("10.0.0.9");  // never counted: nothing changes
  EXPECT_FALSE(peers.admit("10.0.0.1"));
}

TEST(PeerConnections, AnIpv6NetworkIsOnePeerAndAMappedIpv4AddressIsItsIpv4Address) {
  EXPECT_EQ(PeerConnections::peerOf("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
  EXPECT_EQ(PeerConnections::peerOf("2001:db8:1:2:ffff:ffff:ffff:ffff"), "2001:db8:1:2::/64");
  EXPECT_NE(PeerConnections::peerOf("2001:db8:1:3::1"), PeerConnections::peerOf("2001:db8:1:2::1"));
  EXPECT_EQ(PeerConnections::peerOf("::ffff:192.0.2.7"), "192.0.2.7");
  EXPECT_EQ(PeerConnections::peerOf("192.0.2.7"), "192.0.2.7");
  EXPECT_EQ(PeerConnections::peerOf("::1"), "::/64");
  EXPECT_EQ(PeerConnections::peerOf("unix:uid=1000"), "unix:uid=1000");  // not an address: as given
  EXPECT_EQ(PeerConnections::peerOf(""), "");

  PeerConnections peers(1);  // a host with a whole /64 has one share, whichever addresses it uses
  EXPECT_TRUE(peers.admit(PeerConnections::peerOf("2001:db8::1")));
  EXPECT_FALSE(peers.admit(PeerConnections::peerOf("2001:db8::2")));
}
