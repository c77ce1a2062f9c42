// The client tells a stopped worker from a busy one (issue 11): a worker stopped with SIGSTOP used to hang
// its client until it died; now every wait ends after GPOOL_WORKER_TIMEOUT of silence, while a worker
// busy with a long call keeps its client waiting through kMsgAlive frames. Real sockets throughout: a
// real gpool-server and worker for the stopped case, and for the busy case a worker dispatcher in this
// process (so the test can slow its backend down) behind a real TCP connection.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <future>
#include <thread>

#include "connection.h"
#include "dispatcher.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/handshake.h"
#include "loopback_listener.h"
#include "server_process.h"
#include "sim_backend.h"

using namespace gpool;
using namespace std::chrono_literals;
namespace calls = gpool::proto::calls;

namespace {

constexpr auto kBound = 1000ms;       // the client's worker timeout in these tests
constexpr auto kGiveUp = 20s;         // a wait the client should have ended long before

// Runs `f` on another thread; its result, or nullopt when it has not returned within `limit` (the
// worker is then killed, which ends the wait).
template <typename F>
std::optional<int> within(std::chrono::milliseconds limit, pid_t worker, F f) {
  auto fut = std::async(std::launch::async, f);
  bool done = fut.wait_for(limit) == std::future_status::ready;
  ::kill(worker, SIGKILL);
  int r = fut.get();
  return done ? std::optional<int>(r) : std::nullopt;
}

// A sim backend whose calls can be made slow: a long kernel, as the client sees it.
class SlowBackend : public worker::SimBackend {
 public:
  SlowBackend() : SimBackend(worker::SimOptions{}) {}
  using SimBackend::run;
  std::chrono::milliseconds sync_delay{0}, copy_delay{0}, write_delay{0};
  proto::Status run(calls::CtxSynchronize c, calls::CtxSynchronize::in::tuple& in, calls::CtxSynchronize::out::tuple& out) override {
    std::this_thread::sleep_for(sync_delay);
    return SimBackend::run(c, in, out);
  }
  proto::Status run(calls::MemcpyHtoD c, calls::MemcpyHtoD::in::tuple& in, calls::MemcpyHtoD::out::tuple& out) override {
    std::this_thread::sleep_for(std::exchange(write_delay, 0ms));  // the first write only
    return SimBackend::run(c, in, out);
  }
  proto::Status MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) override {
    std::this_thread::sleep_for(std::exchange(copy_delay, 0ms));
    return SimBackend::MemcpyDtoH(dst, src, bytes, stream);
  }
};

// A worker in this process, answering one client over a real loopback TCP connection as gpool-worker does.
struct InProcessWorker {
  SlowBackend backend;
  std::thread thread;
  std::unique_ptr<proto::Transport> worker_end;
  std::unique_ptr<client::Connection> conn;

  explicit InProcessWorker(std::chrono::milliseconds bound) {
    std::string address;
    int listener = test::listenOnLoopback(address);
    thread = std::thread([this, listener] {
      worker_end = proto::adoptTcpSocket(::accept(listener, nullptr, nullptr));
      ::close(listener);
      std::vector<uint8_t> p;
      proto::FrameHeader h = proto::recvFrame(*worker_end, p, 1 << 16);
      proto::HelloReply hello;
      backend.open(0, hello);
      hello.features |= proto::kFeatureAlive;
      auto reply = proto::encode(hello);
      proto::sendFrame(*worker_end, proto::kMsgHello, proto::kIsReply, h.seq, reply.data(), reply.size());
      worker::Dispatcher(backend, *worker_end, hello.devices.at(0).total_mem).serve();
    });
    conn = std::make_unique<client::Connection>(proto::connectTcp(address), address, 0, "", bound);
  }
  ~InProcessWorker() {
    conn.reset();  // the client leaves: serve() returns
    thread.join();
  }
};

}  // namespace

TEST(WorkerLiveness, AStoppedWorkerIsNoticedWhileACallWaits) {
  test::ServerProcess server;
  client::Connection conn(proto::connectTcp(server.address()), server.address(), 0, "", kBound);
  ASSERT_TRUE(conn.watchesWorker()) << "gpool-worker does not offer liveness frames";
  calls::MemAlloc::out::tuple a;
  ASSERT_EQ(conn.call<calls::MemAlloc>(a, uint64_t{1 << 20}), 0);
  pid_t worker = server.lastWorker();
  ASSERT_GT(worker, 0);
  ASSERT_EQ(::kill(worker, SIGSTOP), 0);
  auto result = within(kGiveUp, worker, [&] {
    auto r = conn.call<calls::CtxSynchronize>();
    if (!r) return r;
    return conn.call<calls::CtxSynchronize>();  // later calls fail at once
  });
  ASSERT_TRUE(result.has_value()) << "the client still waits on a stopped worker after " << kGiveUp.count() << " s";
  EXPECT_EQ(*result, client::kErrDeviceUnavailable);
}

TEST(WorkerLiveness, AStoppedWorkerIsNoticedWhileTheClientSends) {
  test::ServerProcess server;
  client::Connection conn(proto::connectTcp(server.address()), server.address(), 0, "", kBound);
  ASSERT_TRUE(conn.watchesWorker());
  const uint64_t chunk = 4 << 20;
  calls::MemAlloc::out::tuple a;
  ASSERT_EQ(conn.call<calls::MemAlloc>(a, chunk), 0);
  pid_t worker = server.lastWorker();
  ASSERT_GT(worker, 0);
  ASSERT_EQ(::kill(worker, SIGSTOP), 0);
  std::vector<uint8_t> data(chunk, 7);
  // Asynchronous copies fill the socket buffers; the send that finds them full must not wait forever.
  auto result = within(kGiveUp, worker, [&] {
    for (int i = 0; i < 1024; ++i)  // 4 GiB: far more than any socket buffers hold
      if (int r = conn.post<calls::MemcpyHtoD>(proto::DevWrite{std::get<0>(a).ptr, proto::Blob{data.data(), chunk}}, uint64_t{0}, 1u))
        return r;
    return 0;
  });
  ASSERT_TRUE(result.has_value()) << "the client is still sending to a stopped worker after " << kGiveUp.count() << " s";
  EXPECT_EQ(*result, client::kErrDeviceUnavailable);
}

TEST(WorkerLiveness, ABusyWorkerKeepsItsClientWaiting) {
  InProcessWorker w(400ms);
  ASSERT_TRUE(w.conn->watchesWorker());
  w.backend.sync_delay = 2000ms;  // five times the bound
  EXPECT_EQ(w.conn->call<calls::CtxSynchronize>(), 0);
  EXPECT_GE(w.conn->aliveFrames(), 3u);
}

TEST(WorkerLiveness, ACopyBehindALongKernelIsNotMistakenForAStall) {
  InProcessWorker w(400ms);
  const uint64_t n = (8u << 20) + 5;
  calls::MemAlloc::out::tuple a;
  ASSERT_EQ(w.conn->call<calls::MemAlloc>(a, n), 0);
  std::vector<uint8_t> src(n), dst(n);
  for (uint64_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 13 + 1);
  ASSERT_EQ(w.conn->post<calls::MemcpyHtoD>(proto::DevWrite{std::get<0>(a).ptr, proto::Blob{src.data(), n}}, uint64_t{0}, 1u), 0);
  w.backend.copy_delay = 2000ms;  // the copy waits for the stream: no reply bytes for a while
  ASSERT_EQ(w.conn->memcpyDtoH(dst.data(), std::get<0>(a).ptr, n, 0), 0);
  EXPECT_EQ(src, dst);
  EXPECT_GE(w.conn->aliveFrames(), 3u);
}

TEST(WorkerLiveness, ABusyWorkerThatReadsNothingKeepsItsClientSending) {
  InProcessWorker w(400ms);
  const uint64_t chunk = 4 << 20;
  calls::MemAlloc::out::tuple a;
  ASSERT_EQ(w.conn->call<calls::MemAlloc>(a, chunk), 0);
  std::vector<uint8_t> data(chunk, 3);
  w.backend.write_delay = 2000ms;  // the first copy holds the worker; the client's sends back up meanwhile
  for (int i = 0; i < 32; ++i)  // 128 MiB: more than the socket buffers hold
    ASSERT_EQ(w.conn->post<calls::MemcpyHtoD>(proto::DevWrite{std::get<0>(a).ptr, proto::Blob{data.data(), chunk}}, uint64_t{0}, 1u), 0)
        << "copy " << i;
  EXPECT_EQ(w.conn->call<calls::CtxSynchronize>(), 0);
}

TEST(WorkerLiveness, AnIdleWorkerSendsNothing) {
  InProcessWorker w(400ms);
  ASSERT_EQ(w.conn->call<calls::CtxSynchronize>(), 0);
  std::this_thread::sleep_for(1500ms);  // quiet between calls for longer than the bound: not a stall
  EXPECT_EQ(w.conn->call<calls::CtxSynchronize>(), 0);
  EXPECT_LE(w.conn->aliveFrames(), 2u);  // the ticks that saw a call, not one per interval
}

// A worker that ends the connection (its lease ended) says why first (kMsgEnded), then closes. A client
// that only sends (asynchronous calls) finds out from a send that fails, before it reads anything: it
// still reports the worker's reason, which waits unread behind what the worker sent before. It used to
// report only the failed send ("Broken pipe", "Connection reset by peer").
TEST(WorkerLiveness, AClientThatOnlySendsStillLearnsWhyTheWorkerEnded) {
  SlowBackend backend;
  std::promise<worker::Dispatcher*> serving;
  std::promise<void> ended;
  std::string address;
  int listener = test::listenOnLoopback(address);
  std::thread thread([&] {
    auto worker_end = proto::adoptTcpSocket(::accept(listener, nullptr, nullptr));
    ::close(listener);
    std::vector<uint8_t> p;
    proto::FrameHeader h = proto::recvFrame(*worker_end, p, 1 << 16);
    proto::HelloReply hello;
    backend.open(0, hello);
    hello.features |= proto::kFeatureAlive | proto::kFeatureEnded;
    auto reply = proto::encode(hello);
    proto::sendFrame(*worker_end, proto::kMsgHello, proto::kIsReply, h.seq, reply.data(), reply.size());
    worker::Dispatcher d(backend, *worker_end, hello.devices.at(0).total_mem);
    serving.set_value(&d);
    d.serve();
    ended.set_value();
  });  // (then the socket closes with the client's last frames unread, as gpool-worker's does when it exits)
  auto conn = std::make_unique<client::Connection>(proto::connectTcp(address), address, 0, "", kBound);
  calls::MemAlloc::out::tuple a;
  const uint64_t chunk = 64 << 10;
  ASSERT_EQ(conn->call<calls::MemAlloc>(a, chunk), 0);
  worker::Dispatcher* d = serving.get_future().get();
  std::vector<uint8_t> data(chunk, 5);
  auto post = [&] { return conn->post<calls::MemcpyHtoD>(proto::DevWrite{std::get<0>(a).ptr, proto::Blob{data.data(), chunk}}, uint64_t{0}, 1u); };
  ASSERT_EQ(post(), 0);
  testing::internal::CaptureStderr();
  d->stop("the test ended its lease");
  ended.get_future().get();
  thread.join();
  int r = 0;
  for (int i = 0; i < 10000 && r == 0; ++i) {
    r = post();
    std::this_thread::sleep_for(1ms);
  }
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(r, client::kErrDeviceUnavailable);
  EXPECT_NE(said.find("(the worker ended the connection: the test ended its lease)"), std::string::npos) << said;
}
