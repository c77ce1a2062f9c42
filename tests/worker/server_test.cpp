// gpool-server as a process: handshake checks, one worker per client, and a misbehaving client that
// does not disturb the others.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <regex>
#include <thread>

#include "gpool/landlock_abi.h"
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
  EXPECT_TRUE(server.waitForLog("disconnected after \\d+ messages \\(over TCP\\); releasing its resources"));
  EXPECT_TRUE(server.waitForLog("worker \\d+ exited with 0"));
}

// Landlock binds the thread that enters it and those it starts after: a worker enters its sandbox before it
// starts a thread of its own (revocation watcher, output relay), so none stays outside (the worker says
// how many would).
TEST(Server, AWorkerStartsItsThreadsInsideItsSandbox) {
  std::string why;
  if (landlockAbi(why) == 0) GTEST_SKIP() << why;
  test::ServerProcess server;
  {
    auto t = hello(server.address());
    test::RawClient c(*t);
    ASSERT_EQ(c.call<calls::MemAlloc>(uint64_t{1 << 20}).first, 0);
  }
  ASSERT_TRUE(server.waitForLog("worker \\d+ exited with 0"));
  EXPECT_EQ(server.log().find("started before the sandbox"), std::string::npos) << server.log();
}

TEST(Server, SilentClientIsTimedOut) {
  test::ServerProcess server({"--handshake-timeout", "200"});
  auto t = connectTcp(server.address());
  uint8_t byte;
  EXPECT_THROW(t->recv(&byte, 1), TransportError);
  EXPECT_TRUE(server.waitForLog("sent no handshake in time"));
}

TEST(Server, AClientThatStopsMidFrameIsDroppedAndAQuietOneKept) {
  test::ServerProcess server({"--stall-timeout", "300"});
  auto quiet = hello(server.address());
  auto stuck = hello(server.address());
  // Half a frame: the header promises 64 bytes, 8 come, then nothing (issue 11: the worker waited forever).
  FrameHeader h{64, calls::MemcpyHtoD::id, kWantsReply, 1};
  uint8_t part[8] = {};
  std::array<ConstBuffer, 2> bufs{ConstBuffer{&h, sizeof h}, ConstBuffer{part, sizeof part}};
  stuck->send(bufs);
  EXPECT_TRUE(server.waitForLog("stopped sending mid-frame for 300 ms"));
  std::vector<uint8_t> p;
  EXPECT_THROW(recvFrame(*stuck, p, 1024), TransportError);  // closed
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // quiet between calls for twice the bound
  test::RawClient q(*quiet);
  EXPECT_EQ(q.call<calls::MemAlloc>(uint64_t{4096}).first, 0);  // still served
}

namespace {

// The descriptors above stdio that a process holds: "socket:[…]", paths, "pipe:[…]"...
std::vector<std::string> openDescriptors(pid_t pid) {
  std::vector<std::string> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.' || std::atoi(e->d_name) <= 2) continue;
    char target[256] = {};
    ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
    if (n > 0) out.push_back(std::string(e->d_name) + " -> " + target);
  }
  ::closedir(d);
  return out;
}

// Whether a process has gone (or is a zombie waiting to be reaped: it runs nothing any more).
bool gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && (text[close + 2] == 'Z' || text[close + 2] == 'X');
}

}  // namespace

// A worker holds its own connection and nothing else of the server's: not the listening socket, not other
// clients' connections (pending or handed to their workers). Otherwise a killed server's port stays bound
// and other clients' connections stay open in workers that are not theirs.
TEST(Server, WorkerHoldsOnlyItsOwnConnection) {
  test::ServerProcess server;
  auto pending = connectTcp(server.address());  // connected, no handshake yet
  auto first = hello(server.address());
  ASSERT_TRUE(server.waitForLog("→ worker \\d+"));
  auto second = hello(server.address());
  test::RawClient c(*second);
  ASSERT_EQ(c.call<calls::MemAlloc>(uint64_t{4096}).first, 0);
  pid_t worker = server.lastWorker();
  ASSERT_GT(worker, 0);
  std::vector<std::string> fds = openDescriptors(worker);
  int sockets = 0;
  for (const auto& f : fds) sockets += f.find("socket:") != std::string::npos;
  std::string all;
  for (const auto& f : fds) all += f + "\n";
  EXPECT_EQ(sockets, 1) << "the worker's descriptors:\n" << all;
}

// The program's CUDA driver settings reach its worker's environment, where the worker's driver reads
// them; anything else a client sends as one is refused before a worker starts.
TEST(Server, AClientsDriverSettingsAreItsWorkersEnvironment) {
  test::ServerProcess server;
  HelloRequest req;
  req.driver_env = {"CUDA_DEVICE_MAX_CONNECTIONS=1", "CUDA_LAUNCH_BLOCKING=1"};
  HelloReply r;
  auto t = hello(server.address(), &r, req);
  ASSERT_EQ(r.status, 0) << r.error;
  ASSERT_TRUE(server.waitForLog("→ worker \\d+"));
  std::ifstream in("/proc/" + std::to_string(server.lastWorker()) + "/environ");
  std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(env.find(std::string("CUDA_DEVICE_MAX_CONNECTIONS=1") + '\0'), std::string::npos);
  EXPECT_NE(env.find(std::string("CUDA_LAUNCH_BLOCKING=1") + '\0'), std::string::npos);

  HelloRequest bad;
  bad.driver_env = {"LD_PRELOAD=/tmp/evil.so"};
  hello(server.address(), &r, bad);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.error.find("not one a client may give its worker"), std::string::npos) << r.error;
  EXPECT_TRUE(server.alive());
}

// A server that dies takes its workers with it: their clients see the connection end at once instead of
// being served by a worker nobody supervises.
TEST(Server, WorkersEndWithTheirServer) {
  test::ServerProcess server;
  auto t = hello(server.address());
  test::RawClient c(*t);
  ASSERT_EQ(c.call<calls::MemAlloc>(uint64_t{4096}).first, 0);
  pid_t worker = server.lastWorker();
  ASSERT_GT(worker, 0);
  server.kill9();
  bool ended = false;
  for (int i = 0; i < 100 && !ended; ++i) {  // 2 s
    ended = gone(worker);
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(ended) << "worker " << worker << " outlived its server";
}

// A server with one client that has been served once, for tests of how the server and its worker stop.
struct ServedClient {
  test::ServerProcess server;
  std::unique_ptr<Transport> t = hello(server.address());
  test::RawClient c{*t};
  ServedClient() { EXPECT_EQ(alloc(), 0); }
  int alloc() { return c.call<calls::MemAlloc>(uint64_t{4096}).first; }
};

// The first SIGTERM stops new clients but lets a running one finish; the server leaves with its last worker.
// Ctrl-C at the server's terminal (SIGINT to its process group, its workers too) does the same.
TEST(Server, ShutdownAndCtrlCLetRunningClientsFinish) {
  for (bool ctrl_c : {false, true}) {
    SCOPED_TRACE(ctrl_c ? "Ctrl-C" : "SIGTERM");
    ServedClient s;
    ctrl_c ? s.server.interruptGroup() : s.server.terminate();
    ASSERT_TRUE(s.server.waitForLog("no new clients; 1 worker\\(s\\) finish with their clients"));
    EXPECT_EQ(s.alloc(), 0);                                     // still served
    EXPECT_THROW(hello(s.server.address()), std::exception);     // nobody new
    EXPECT_FALSE(s.server.exitsWithin(200));
    s.t.reset();  // the client leaves
    EXPECT_TRUE(s.server.exitsWithin(5000));
  }
}

// SIGTERM from anyone but its server (an init system stopping the whole service) is not a lease's end:
// the worker stops serving its client, and says who stopped it.
TEST(Server, AWorkerStoppedByAnotherProcessSaysSo) {
  ServedClient s;
  pid_t worker = s.server.lastWorker();
  ASSERT_GT(worker, 0);
  ::kill(worker, SIGTERM);
  ASSERT_TRUE(s.server.waitForLog("worker " + std::to_string(worker) + ": closing connection to .*: gpool-worker was stopped "
                                  "\\(SIGTERM from process " + std::to_string(::getpid()) + ", not its gpool-server\\)"));
  EXPECT_ANY_THROW(s.alloc());  // not served: the connection ended
}

// At the open-file limit accepting fails; the server backs off and logs once instead of spinning, and
// serves again once descriptors are free.
TEST(Server, AcceptBacksOffAtTheDescriptorLimit) {
  test::ServerProcess server({}, 24);
  std::vector<std::unique_ptr<Transport>> held;
  for (int i = 0; i < 40; ++i) {
    try {
      held.push_back(connectTcp(server.address()));
    } catch (const std::exception&) {
      break;
    }
  }
  ASSERT_TRUE(server.waitForLog("accept failed"));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  std::string log = server.log();
  size_t failures = 0;
  for (size_t at = log.find("accept failed"); at != std::string::npos; at = log.find("accept failed", at + 1)) ++failures;
  EXPECT_LE(failures, 2u) << "the accept loop spun";
  held.clear();
  HelloReply reply;
  auto t = hello(server.address(), &reply);
  EXPECT_EQ(reply.status, 0);
}

// A client's name reaches the log escaped: it can neither forge a log line nor send a terminal escape.
TEST(Server, ClientNamesAreLoggedEscaped) {
  test::ServerProcess server;
  HelloRequest req;
  req.client = "vm pid 1\n2026-01-01 00:00:00.000 info gpool-server[1] forged\x1b[2J";
  auto t = hello(server.address(), nullptr, req);
  ASSERT_TRUE(server.waitForLog("→ worker \\d+"));
  std::string log = server.log();
  EXPECT_EQ(log.find('\x1b'), std::string::npos);
  EXPECT_EQ(log.find("\n2026-01-01"), std::string::npos);
  EXPECT_NE(log.find("vm pid 1\\x0a2026-01-01"), std::string::npos) << log;
}
