// Server-to-server copies between two sim workers (peer_links.h): each worker behind its own in-memory
// request connection, the link between them over real TCP on loopback.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/transport.h"
#include "peer_links.h"
#include "test_client.h"
#include "worker_harness.h"

using namespace gpool;
using namespace gpool::proto;
namespace calls = gpool::proto::calls;

namespace {

struct Worker {
  test::Harness h;
  test::RawClient c{*h.client};
  uint64_t alloc(uint64_t bytes) {
    auto [st, out] = c.call<calls::MemAlloc>(bytes);
    EXPECT_EQ(st, 0);
    return std::get<0>(out).ptr;
  }
  void write(uint64_t ptr, const std::vector<uint8_t>& v) {
    for (uint64_t off = 0; off < v.size(); off += kBulkChunk) {
      uint64_t n = std::min<uint64_t>(kBulkChunk, v.size() - off);
      ASSERT_EQ(c.call<calls::MemcpyHtoD>(DevWrite{ptr + off, Blob{v.data() + off, n}}, uint64_t{0}, 0u).first, 0);
    }
  }
  std::vector<uint8_t> read(uint64_t ptr, uint64_t bytes) {
    auto [st, out] = c.call<calls::MemcpyDtoH2D>(DevRect{ptr, bytes, bytes, 1}, uint64_t{0});
    EXPECT_EQ(st, 0);
    return std::get<0>(out);
  }
};

struct Listening {
  uint32_t port = 0, link = 0;
  std::vector<uint8_t> key;
};

Listening listen(Worker& w) {
  auto [st, out] = w.c.call<calls::PeerListen>();
  EXPECT_EQ(st, 0);
  Listening l{std::get<0>(out), std::get<2>(out), std::get<1>(out)};
  EXPECT_EQ(l.key.size(), worker::PeerLinks::kKeyBytes);
  return l;
}

// Sets a link up from `from` to `to`; returns (sender's link, receiver's link).
std::pair<uint32_t, uint32_t> link(Worker& from, Worker& to) {
  Listening l = listen(to);
  auto [st, out] = from.c.call<calls::PeerConnect>(std::string("127.0.0.1"), l.port, l.key);
  EXPECT_EQ(st, 0);
  EXPECT_EQ(to.c.call<calls::PeerAccept>(l.link).first, 0);
  return {std::get<0>(out), l.link};
}

std::vector<uint8_t> pattern(uint64_t bytes, uint8_t seed) {
  std::vector<uint8_t> v(bytes);
  for (uint64_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed + (i >> 20));
  return v;
}

std::unique_ptr<Transport> connectWith(uint32_t port, const uint8_t* first, size_t n) {
  auto t = connectTcp("127.0.0.1:" + std::to_string(port));
  ConstBuffer b{first, n};
  t->send(std::span(&b, 1));
  return t;
}

}  // namespace

TEST(PeerLinks, CopiesGoFromOneWorkerStraightToTheOther) {
  Worker a, b;
  const uint64_t n = 9 * kBulkChunk + 123;  // several pieces, the last a short one
  uint64_t src = a.alloc(n), dst = b.alloc(n + 64);
  std::vector<uint8_t> data = pattern(n, 3);
  a.write(src, data);
  b.write(dst + n, std::vector<uint8_t>(64, 0xee));
  auto [send, receive] = link(a, b);
  for (int round = 0; round < 2; ++round) {  // the link carries one copy after another
    if (round == 1) a.write(src, data = pattern(n, 99));
    a.c.post<calls::PeerSend>(send, DevRange{src, n});
    ASSERT_EQ(b.c.call<calls::PeerReceive>(receive, DevRange{dst, n}).first, 0);
    EXPECT_TRUE(b.read(dst, n) == data) << "round " << round;
  }
  EXPECT_EQ(b.read(dst + n, 64), std::vector<uint8_t>(64, 0xee));  // nothing past the range
  EXPECT_EQ(a.c.call<calls::CtxSynchronize>().first, 0);            // and no error latched on the sender
}

TEST(PeerLinks, OnlyTheHolderOfTheKeyIsAcceptedAndItMustBeTheReceiverItReaches) {
  Worker a, b;
  uint64_t src = a.alloc(4096), dst = b.alloc(4096);
  a.write(src, pattern(4096, 1));
  Listening l = listen(b);
  std::vector<uint8_t> wrong(16, 0);
  auto intruder = connectWith(l.port, wrong.data(), wrong.size());  // first in line, without the key
  auto [st, out] = a.c.call<calls::PeerConnect>(std::string("127.0.0.1"), l.port, l.key);
  ASSERT_EQ(st, 0);
  ASSERT_EQ(b.c.call<calls::PeerAccept>(l.link).first, 0);
  char byte = 0;
  EXPECT_THROW(intruder->recv(&byte, 1), TransportError);  // closed, never answered
  a.c.post<calls::PeerSend>(std::get<0>(out), DevRange{src, 4096});
  ASSERT_EQ(b.c.call<calls::PeerReceive>(l.link, DevRange{dst, 4096}).first, 0);
  EXPECT_EQ(b.read(dst, 4096), pattern(4096, 1));

  // A sender whose "receiver" does not answer with the key's second half sends nothing and loses its link.
  Listening fake = listen(b);
  std::vector<uint8_t> key(fake.key.begin(), fake.key.end());
  key[31] ^= 1;  // the sender expects an answer the real receiver will not give
  auto [st2, out2] = a.c.call<calls::PeerConnect>(std::string("127.0.0.1"), fake.port, key);
  ASSERT_EQ(st2, 0);
  EXPECT_EQ(b.c.call<calls::PeerAccept>(fake.link).first, 0);  // the first half is right
  a.c.post<calls::PeerSend>(std::get<0>(out2), DevRange{src, 4096});
  EXPECT_EQ(a.c.call<calls::CtxSynchronize>().first, 0);  // a broken link is the receiver's to report
  EXPECT_NE(b.c.call<calls::PeerReceive>(fake.link, DevRange{dst, 4096}).first, 0);
  a.c.post<calls::PeerSend>(std::get<0>(out2), DevRange{src, 4096});
  EXPECT_EQ(a.c.call<calls::CtxSynchronize>().first, cu::kInvalidValue);  // gone
}

TEST(PeerLinks, AReceiverTakesOnlyTheBytesItExpects) {
  Worker b;
  uint64_t dst = b.alloc(8192);
  b.write(dst, std::vector<uint8_t>(8192, 0x11));
  Listening l = listen(b);
  // A sender with the key that announces more than the copy's 4096 bytes.
  auto sender = connectWith(l.port, l.key.data(), 16);
  ASSERT_EQ(b.c.call<calls::PeerAccept>(l.link).first, 0);
  std::vector<uint8_t> answer(16);
  sender->recv(answer.data(), answer.size());
  EXPECT_TRUE(std::equal(answer.begin(), answer.end(), l.key.begin() + 16));
  uint64_t announced = 8192;
  std::vector<uint8_t> flood(8192, 0x22);
  std::array<ConstBuffer, 2> bufs{ConstBuffer{&announced, 8}, ConstBuffer{flood.data(), flood.size()}};
  sender->send(bufs);
  EXPECT_NE(b.c.call<calls::PeerReceive>(l.link, DevRange{dst, 4096}).first, 0);
  EXPECT_EQ(b.read(dst, 8192), std::vector<uint8_t>(8192, 0x11));  // nothing written
  EXPECT_EQ(b.c.call<calls::PeerReceive>(l.link, DevRange{dst, 4096}).first, cu::kInvalidValue);  // link closed
}

TEST(PeerLinks, RangesLinksAndAddressesAreChecked) {
  Worker a, b;
  uint64_t src = a.alloc(4096), dst = b.alloc(4096);
  auto [send, receive] = link(a, b);
  // Outside the client's memory, on either side: refused before any byte moves.
  EXPECT_EQ(b.c.call<calls::PeerReceive>(receive, DevRange{dst, 8192}).first, cu::kInvalidValue);
  a.c.post<calls::PeerSend>(send, DevRange{src + 4000, 4096});
  EXPECT_EQ(a.c.call<calls::CtxSynchronize>().first, cu::kInvalidValue);
  // Links by the wrong side's number, or numbers never handed out.
  EXPECT_EQ(b.c.call<calls::PeerReceive>(send + 1000, DevRange{dst, 16}).first, cu::kInvalidValue);
  EXPECT_EQ(a.c.call<calls::PeerReceive>(send, DevRange{src, 16}).first, cu::kInvalidValue);  // a sending link
  EXPECT_EQ(b.c.call<calls::PeerAccept>(receive).first, cu::kInvalidValue);  // accepted already
  // A malformed key, or a port nobody listens on: refused, the latter at once.
  EXPECT_EQ(a.c.call<calls::PeerConnect>(std::string("127.0.0.1"), 1u, std::vector<uint8_t>(5)).first, cu::kInvalidValue);
  Listening l = listen(b);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(a.c.call<calls::PeerConnect>(std::string("127.0.0.1"), 1u, l.key).first, cu::kNotSupported);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(worker::PeerLinks::kConnectTimeoutMs / 1000 + 1));
}
