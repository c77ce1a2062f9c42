// A client moving from TCP (here the in-memory transport) to shared memory with its worker, as the
// client library does after the handshake (docs/protocol.md, "Shared memory").
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/shm_transport.h"
#include "test_client.h"
#include "worker_harness.h"

using namespace gpool;
using namespace gpool::proto;
namespace calls = gpool::proto::calls;

namespace {

struct Offer {
  Status status = -1;
  std::string name;
  std::vector<uint8_t> token;
};

Offer askToMove(Transport& tcp, const std::string& host, uint64_t seq) {
  std::vector<uint8_t> p;
  Writer(p).putAll(kTransportShm, host);
  sendFrame(tcp, kMsgSwitchTransport, kWantsReply, seq, p.data(), p.size());
  std::vector<uint8_t> reply;
  FrameHeader h = recvFrame(tcp, reply, 4096);
  EXPECT_EQ(h.msg, kMsgSwitchTransport);
  Offer o;
  Reader r(reply.data(), reply.size());
  EXPECT_TRUE(r.getAll(o.status, o.name, o.token) && r.atEnd());
  return o;
}

int connectLocal(const std::string& name) {
  int fd = connectAbstractSocket(name);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  return fd;
}

}  // namespace

TEST(TransportSwitch, AClientOfThisHostMovesToSharedMemoryWithTheToken) {
  test::Harness h;
  Offer o = askToMove(*h.client, shmHostIdentity(), 1);
  ASSERT_EQ(o.status, 0);
  ASSERT_EQ(o.token.size(), 16u);
  int intruder = connectLocal(o.name);  // first in line, with a wrong token: closed, given nothing
  std::vector<uint8_t> wrong(16, 0);
  ASSERT_EQ(::send(intruder, wrong.data(), wrong.size(), MSG_NOSIGNAL), 16);
  int link = connectLocal(o.name);
  ASSERT_EQ(::send(link, o.token.data(), o.token.size(), MSG_NOSIGNAL), 16);
  ShmParts parts;
  ASSERT_TRUE(recvShmParts(link, parts, 5000));
  ShmParts none;
  EXPECT_FALSE(recvShmParts(intruder, none, 100));
  ::close(intruder);
  auto shm = openShmTransport(parts, kClientSide, link, "worker");
  // The same worker, its handles and memory, now over shared memory.
  test::RawClient c(*shm);
  auto [st, out] = c.call<calls::MemAlloc>(uint64_t{4096});
  ASSERT_EQ(st, 0);
  c.post<calls::MemcpyHtoD>(DevWrite{std::get<0>(out).ptr, Blob{"shared", 6}}, uint64_t{0}, 0u);
  auto [rs, rows] = c.call<calls::MemcpyDtoH2D>(DevRect{std::get<0>(out).ptr, 6, 6, 1}, uint64_t{0});
  ASSERT_EQ(rs, 0);
  EXPECT_EQ(std::string(std::get<0>(rows).begin(), std::get<0>(rows).end()), "shared");
  shm.reset();  // the client goes: the worker's loop ends cleanly
  h.thread.join();
  EXPECT_TRUE(h.result.clean) << h.result.reason;
}

TEST(TransportSwitch, AClientOfAnotherHostOrNamespaceStaysOnTcp) {
  test::Harness h;
  Offer o = askToMove(*h.client, "another-boot-id net:[4026531992]", 1);
  EXPECT_EQ(o.status, cu::kNotSupported);
  EXPECT_TRUE(o.name.empty());
  test::RawClient c(*h.client);  // still served on TCP
  EXPECT_EQ(c.call<calls::MemAlloc>(uint64_t{64}).first, 0);
}

TEST(TransportSwitch, AClientThatNeverComesStaysOnTcp) {
  test::Harness h;
  Offer o = askToMove(*h.client, shmHostIdentity(), 1);
  ASSERT_EQ(o.status, 0);
  test::RawClient c(*h.client);  // answered after the worker gave up waiting for the socket
  EXPECT_EQ(c.call<calls::MemAlloc>(uint64_t{64}).first, 0);
}
