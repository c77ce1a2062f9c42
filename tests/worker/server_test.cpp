// gpool-server as a process: handshake checks, one worker per client, and a misbehaving client that
// does not disturb the others.
#include <gtest/gtest.h>
#include <signal.h>

#include "gpool/protocol/handshake.h"
#include "server_process.h"
#include "test_client.h"

using namespace gpool;
using namespace gpool::proto;
namespace calls = gpool::proto::calls;

namespace {

std::unique_ptr<Transport> hello(const std::string& address, HelloReply* out = nullptr, HelloRequest req = {}) {
  auto t = connectTcp(address);
  auto p = encode(req);
  sendFrame(*t, kMsgHello, kWantsReply, 0, p.data(), p.size());
  std::vector<uint8_t> reply;
  FrameHeader h = recvFrame(*t, reply, 1 << 20);
  EXPECT_EQ(h.msg, kMsgHello);
  auto r = decodeHelloReply(reply);
  EXPECT_TRUE(r);
  if (out && r) *out = *r;
  return t;
}

}  // namespace

TEST(Server, HandshakeDescribesTheDevice) {
  test::ServerProcess server;
  HelloReply r;
  auto t = hello(server.address(), &r);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.backend, "sim");
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_FALSE(r.devices[0].name.empty());
  EXPECT_GT(r.devices[0].total_mem, 0u);
}

TEST(Server, RefusesWrongVersionAndBadDeviceWithReasons) {
  test::ServerProcess server;
  HelloReply r;
  HelloRequest old;
  old.major = kVersionMajor + 1;
  hello(server.address(), &r, old);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.error.find("protocol version"), std::string::npos) << r.error;
  HelloRequest dev;
  dev.device = 5;
  hello(server.address(), &r, dev);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.error.find("device 5"), std::string::npos) << r.error;
  EXPECT_TRUE(server.alive());
}

TEST(Server, GarbageInsteadOfHelloIsDroppedAndOthersServed) {
  test::ServerProcess server;
  {
    auto bad = connectTcp(server.address());
    const char junk[64] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ConstBuffer b{junk, sizeof junk};
    bad->send(std::span(&b, 1));
    uint8_t byte;
    EXPECT_THROW(bad->recv(&byte, 1), TransportError);
  }
  HelloReply r;
  auto good = hello(server.address(), &r);
  EXPECT_EQ(r.status, 0);
  test::RawClient c(*good);
  EXPECT_EQ(c.call<calls::CtxSynchronize>().first, 0);
}

TEST(Server, MisbehavingClientLosesOnlyItsOwnConnection) {
  test::ServerProcess server;
  auto good = hello(server.address());
  auto bad = hello(server.address());
  test::RawClient g(*good), b(*bad);
  auto [st, out] = g.call<calls::MemAlloc>(uint64_t{4096});
  ASSERT_EQ(st, 0);
  // The bad client: an unknown message (answered), then a truncated request (connection closed).
  b.send(0x6666, kWantsReply, {});
  EXPECT_EQ(b.readStatusOnly(0x6666), cu::kNotSupported);
  b.send(calls::MemcpyHtoD::id, kWantsReply, {9, 9, 9});
  std::vector<uint8_t> p;
  EXPECT_THROW(recvFrame(*bad, p, 1024), TransportError);
  EXPECT_TRUE(server.waitForLog("protocol violation: malformed MemcpyHtoD"));
  // The good client carries on with its state intact.
  uint64_t ptr = std::get<0>(out).ptr;
  EXPECT_EQ(g.call<calls::Memset>(DevFill{ptr, 1, 4096}, 7u, uint64_t{0}, 0u).first, 0);
  EXPECT_EQ(g.call<calls::MemFree>(ptr).first, 0);
  EXPECT_TRUE(server.alive());
}

TEST(Server, WorkerExitsWhenItsClientDisconnects) {
  test::ServerProcess server;
  {
    auto t = hello(server.address());
    test::RawClient c(*t);
    ASSERT_EQ(c.call<calls::MemAlloc>(uint64_t{1 << 20}).first, 0);
  }
  EXPECT_TRUE(server.waitForLog("disconnected after \\d+ messages; releasing its resources"));
  EXPECT_TRUE(server.waitForLog("worker \\d+ exited with 0"));
}

TEST(Server, SilentClientIsTimedOut) {
  test::ServerProcess server({"--handshake-timeout", "200"});
  auto t = connectTcp(server.address());
  uint8_t byte;
  EXPECT_THROW(t->recv(&byte, 1), TransportError);
  EXPECT_TRUE(server.waitForLog("sent no handshake in time"));
}
