// The UCX transport between two endpoints of this process (ucx_transport.h): frames both ways whole and in
// order, the end of the link as the peer's end, stall timeouts, and a peer's address checked. Without UCX
// on this host each test skips, saying so.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <numeric>
#include <thread>

#include "gpool/protocol/ucx_transport.h"

using namespace gpool::proto;

namespace {

// The TCP connection a UCX transport moves off, reduced to what it keeps using: its liveness descriptor.
class Link final : public Transport {
 public:
  explicit Link(int fd) : fd_(fd) {}
  ~Link() override { ::close(fd_); }
  void send(std::span<const ConstBuffer>) override {}
  void recv(void*, size_t, bool) override {}
  void shutdown() override {}
  std::string peer() const override { return "link"; }
  int liveness() const override { return fd_; }

 private:
  int fd_;
};

struct Pair {
  std::unique_ptr<Link> link_a, link_b;
  std::unique_ptr<Transport> a, b;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    link_a = std::make_unique<Link>(fds[0]);
    link_b = std::make_unique<Link>(fds[1]);
    auto ea = makeUcxEndpoint(), eb = makeUcxEndpoint();
    std::vector<uint8_t> addr_a = ea->address(), addr_b = eb->address();
    a = openUcxTransport(std::move(ea), addr_b, *link_a, "b");
    b = openUcxTransport(std::move(eb), addr_a, *link_b, "a");
  }
};

#define GPOOL_NEEDS_UCX()                                                   \
  do {                                                                      \
    std::string why;                                                        \
    if (!ucxAvailable(why)) GTEST_SKIP() << "no UCX on this host: " << why; \
  } while (0)

}  // namespace

TEST(Ucx, FramesGoBothWaysWholeAndInOrder) {
  GPOOL_NEEDS_UCX();
  Pair p;
  std::vector<uint8_t> big(16u << 20);
  std::iota(big.begin(), big.end(), uint8_t{0});
  std::thread sender([&] {
    const char head[] = "head";
    std::array<ConstBuffer, 2> two{ConstBuffer{head, 4}, ConstBuffer{big.data(), big.size()}};
    p.a->send(two);
    uint32_t n = 7;
    ConstBuffer one{&n, 4};
    p.a->send(std::span(&one, 1));
  });
  char head[4];
  p.b->recv(head, 4, true);
  EXPECT_EQ(std::string(head, 4), "head");
  std::vector<uint8_t> got(big.size());
  p.b->recv(got.data(), 1000);  // a message read in pieces
  p.b->recv(got.data() + 1000, got.size() - 1000);
  EXPECT_EQ(got, big);
  uint32_t n = 0;
  p.b->recv(&n, 4);
  EXPECT_EQ(n, 7u);
  sender.join();
  uint32_t back = 9;
  ConstBuffer one{&back, 4};
  p.b->send(std::span(&one, 1));
  uint32_t heard = 0;
  p.a->recv(&heard, 4, true);
  EXPECT_EQ(heard, 9u);
}

TEST(Ucx, TheEndOfTheLinkIsThePeersEnd) {
  GPOOL_NEEDS_UCX();
  Pair p;
  auto start = std::chrono::steady_clock::now();
  std::thread gone([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    p.link_b.reset();  // the peer's process ends: its TCP connection closes
  });
  char byte;
  EXPECT_THROW(p.a->recv(&byte, 1, true), TransportError);
  gone.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Ucx, APeerSilentMidFrameStallsOut) {
  GPOOL_NEEDS_UCX();
  Pair p;
  p.a->setStallTimeout(300);
  char byte;
  EXPECT_THROW(p.a->recv(&byte, 1, false), TransportStalled);
}

TEST(Ucx, ShutdownWakesAWaitingReceiver) {
  GPOOL_NEEDS_UCX();
  Pair p;
  std::thread stop([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    p.a->shutdown();
  });
  char byte;
  EXPECT_THROW(p.a->recv(&byte, 1, true), TransportError);
  stop.join();
}

TEST(Ucx, AnAddressThatIsNoneIsRefused) {
  GPOOL_NEEDS_UCX();
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  Link link(fds[0]);
  ::close(fds[1]);
  EXPECT_THROW(openUcxTransport(makeUcxEndpoint(), {}, link, "x"), TransportError);
  EXPECT_THROW(openUcxTransport(makeUcxEndpoint(), std::vector<uint8_t>(kMaxUcxAddress + 1, 1), link, "x"), TransportError);
}
