// The client's ordered channel against a real worker dispatcher (sim backend) over the in-memory
// transport: batching of asynchronous calls, latched errors, direct sends of large buffers, and loss.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "connection.h"
#include "dispatcher.h"
#include "gpool/protocol/loopback_transport.h"
#include "sim_backend.h"

using namespace gpool;
namespace calls = gpool::proto::calls;

namespace {

struct Remote {
  worker::SimBackend backend{worker::SimOptions{}};
  std::unique_ptr<proto::Transport> server_end;
  std::thread thread;
  std::unique_ptr<client::Connection> conn;

  Remote() {
    auto [client_end, server] = proto::makeLoopbackPair();
    server_end = std::move(server);
    thread = std::thread([this] {
      std::vector<uint8_t> p;
      proto::FrameHeader h = proto::recvFrame(*server_end, p, 1 << 16);
      proto::HelloReply hello;
      backend.open(0, hello);
      auto reply = proto::encode(hello);
      proto::sendFrame(*server_end, proto::kMsgHello, proto::kIsReply, h.seq, reply.data(), reply.size());
      worker::Dispatcher(backend, *server_end, hello.devices.at(0).total_mem).serve();
    });
    conn = std::make_unique<client::Connection>(std::move(client_end), "loopback", 0, "");
  }
  ~Remote() {
    server_end->shutdown();
    thread.join();
  }
};

}  // namespace

TEST(Connection, AsynchronousCallsAreBatchedIntoFewWrites) {
  // Batching has a time bound (500 us): under sanitizers the posts are slow enough to cross it often.
  if (std::getenv("GPOOL_SANITIZED")) GTEST_SKIP() << "counts writes per time bound: run in the normal build";
  Remote r;
  calls::StreamCreate::out::tuple s;
  ASSERT_EQ(r.conn->call<calls::StreamCreate>(s, 0u, 0), 0);
  uint64_t writes_before = r.conn->writes();
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(r.conn->post<calls::EventRecord>(uint64_t{0}, std::get<0>(s), 0u), 0);  // bad event: succeeds now, latched
  EXPECT_EQ(r.conn->call<calls::StreamSynchronize>(std::get<0>(s)), proto::cu::kInvalidHandle);
  uint64_t writes = r.conn->writes() - writes_before;
  EXPECT_LT(writes, 20u) << "1000 small asynchronous frames took " << writes << " writes";
  // the latch cleared: the next wait succeeds
  EXPECT_EQ(r.conn->call<calls::StreamSynchronize>(std::get<0>(s)), 0);
}

TEST(Connection, PendingWorkIsFlushedWithoutAWait) {
  Remote r;
  calls::MemAlloc::out::tuple p;
  ASSERT_EQ(r.conn->call<calls::MemAlloc>(p, uint64_t{64}), 0);
  uint64_t writes_before = r.conn->writes();
  ASSERT_EQ(r.conn->post<calls::Memset>(proto::DevFill{std::get<0>(p).ptr, 1, 64}, 5u, uint64_t{0}, 1u), 0);
  // the time bound sends it even though nobody waits
  for (int i = 0; i < 200 && r.conn->writes() == writes_before; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GT(r.conn->writes(), writes_before);
}

TEST(Connection, LargeCopiesRoundTripThroughDirectSends) {
  Remote r;
  const size_t n = (8u << 20) + 13;
  calls::MemAlloc::out::tuple out;
  ASSERT_EQ(r.conn->call<calls::MemAlloc>(out, uint64_t{n}), 0);
  uint64_t p = std::get<0>(out).ptr;
  std::vector<uint8_t> src(n), dst(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 31 + 7);
  ASSERT_EQ(r.conn->post<calls::MemcpyHtoD>(proto::DevWrite{p, proto::Blob{src.data(), n}}, uint64_t{0}, 1u), 0);
  ASSERT_EQ(r.conn->memcpyDtoH(dst.data(), p, n, 0), 0);
  EXPECT_EQ(src, dst);
  EXPECT_EQ(r.conn->memcpyDtoH(dst.data(), p + 1, n, 0), proto::cu::kInvalidValue);  // past the end: refused
}

TEST(Connection, LossIsStickyAndReported) {
  Remote r;
  r.server_end->shutdown();
  EXPECT_EQ(r.conn->call<calls::CtxSynchronize>(), client::kErrDeviceUnavailable);
  EXPECT_EQ(r.conn->post<calls::MemFree>(uint64_t{1}), client::kErrDeviceUnavailable);
  EXPECT_EQ(r.conn->lost(), client::kErrDeviceUnavailable);
}

// A lease of several devices: each connection marks the handles its worker hands out (handle_tags.h).
TEST(Connection, ALeaseOfTwoKeepsEachWorkersHandlesApart) {
  Remote a, b;
  a.conn->joinLease(0, nullptr);
  b.conn->joinLease(1, nullptr);
  calls::StreamCreate::out::tuple sa, sb;
  ASSERT_EQ(a.conn->call<calls::StreamCreate>(sa, 0u, 0), 0);
  ASSERT_EQ(b.conn->call<calls::StreamCreate>(sb, 0u, 0), 0);
  uint64_t ha = std::get<0>(sa), hb = std::get<0>(sb);
  ASSERT_EQ(client::tags::strip(ha), client::tags::strip(hb)) << "two sim workers hand out the same first stream";
  EXPECT_NE(ha, hb);
  EXPECT_EQ(client::tags::owner(ha), 0);
  EXPECT_EQ(client::tags::owner(hb), 1);
  EXPECT_EQ(b.conn->call<calls::StreamSynchronize>(hb), 0);
  EXPECT_EQ(b.conn->call<calls::StreamSynchronize>(ha), proto::cu::kInvalidHandle) << "device 0's stream sent to device 1";
  EXPECT_EQ(a.conn->call<calls::StreamSynchronize>(hb), proto::cu::kInvalidHandle) << "device 1's stream sent to device 0";
  EXPECT_EQ(b.conn->post<calls::StreamDestroy>(ha), proto::cu::kInvalidHandle);
  calls::MemAlloc::out::tuple p;
  ASSERT_EQ(b.conn->call<calls::MemAlloc>(p, uint64_t{64}), 0);
  uint8_t byte = 0;
  EXPECT_EQ(b.conn->memcpyDtoH(&byte, std::get<0>(p).ptr, 1, ha), proto::cu::kInvalidHandle);
  EXPECT_EQ(b.conn->memcpyDtoH(&byte, std::get<0>(p).ptr, 1, 0), 0) << "the default stream is every device's";
  EXPECT_EQ(a.conn->lost() + b.conn->lost(), 0) << "a refused handle costs the call, not the connection";
}

// The attack: a worker that hands out a value with the mark byte set would make it pass for another
// device's handle. Its reply is malformed, and the connection ends.
TEST(Connection, AHandleUsingTheMarkByteIsAProtocolError) {
  auto [client_end, server_end] = proto::makeLoopbackPair();
  std::thread fake([&server = *server_end] {
    try {
      std::vector<uint8_t> p;
      proto::FrameHeader h = proto::recvFrame(server, p, 1 << 16);
      worker::SimBackend backend{worker::SimOptions{}};
      proto::HelloReply hello;
      backend.open(0, hello);
      hello.features = 0;
      auto reply = proto::encode(hello);
      proto::sendFrame(server, proto::kMsgHello, proto::kIsReply, h.seq, reply.data(), reply.size());
      do h = proto::recvFrame(server, p, 1 << 20);
      while (h.msg != calls::StreamCreate::id);
      std::vector<uint8_t> out;
      proto::Writer w(out);
      w.put(proto::Status{0});
      w.put(uint64_t{0x0300000000001000});  // a "stream" of device 3
      proto::sendFrame(server, h.msg, proto::kIsReply, h.seq, out.data(), out.size());
      proto::recvFrame(server, p, 1 << 20);  // until the client hangs up
    } catch (const std::exception&) {
    }
  });
  {
    client::Connection c(std::move(client_end), "loopback", 0, "");
    c.joinLease(1, nullptr);
    calls::StreamCreate::out::tuple s;
    EXPECT_EQ(c.call<calls::StreamCreate>(s, 0u, 0), client::kErrDeviceUnavailable);
    EXPECT_NE(c.lost(), 0);
  }
  server_end->shutdown();
  fake.join();
}
