// The shared-memory transport between two ends in one process: each end with its own descriptors, passed
// over a Unix socket as between a worker and its client.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/shm_transport.h"

using namespace gpool::proto;

namespace {

struct Pair {
  std::unique_ptr<Transport> worker, client;
  int client_segment = -1;  // a duplicate of the client's segment descriptor, to tamper with
  explicit Pair(size_t ring = 64u << 10) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    ShmParts made = createShmParts(ring), got;
    EXPECT_TRUE(sendShmParts(sv[0], made));
    EXPECT_TRUE(recvShmParts(sv[1], got, 1000));
    client_segment = ::dup(got.segment);
    worker = openShmTransport(made, kWorkerSide, sv[0], "client");
    client = openShmTransport(got, kClientSide, sv[1], "worker");
  }
  ~Pair() { ::close(client_segment); }
};

void sendBytes(Transport& t, const void* p, size_t n) {
  ConstBuffer b{p, n};
  t.send(std::span(&b, 1));
}

}  // namespace

TEST(Shm, CarriesFramesBothWays) {
  Pair p;
  sendFrame(*p.client, 0x0101, kWantsReply, 7, "ping", 4);
  std::vector<uint8_t> payload;
  FrameHeader h = recvFrame(*p.worker, payload, 64);
  EXPECT_EQ(h.msg, 0x0101);
  EXPECT_EQ(h.seq, 7u);
  EXPECT_EQ(std::string(payload.begin(), payload.end()), "ping");
  sendFrame(*p.worker, 0x0101, kIsReply, 7, "pong!", 5);
  h = recvFrame(*p.client, payload, 64);
  EXPECT_EQ(std::string(payload.begin(), payload.end()), "pong!");
}

TEST(Shm, StreamsMoreThanTheRingHoldsInOrder) {
  Pair p;  // 64 KiB rings: 24 MiB in odd-sized writes wraps each ring hundreds of times
  const size_t total = 24u << 20;
  std::vector<uint8_t> sent(total);
  for (size_t i = 0; i < total; ++i) sent[i] = static_cast<uint8_t>(i * 131 + (i >> 16));
  std::thread writer([&] {
    for (size_t off = 0; off < total;) {
      size_t n = std::min<size_t>(total - off, 1 + (off * 7919) % 300000);
      sendBytes(*p.client, sent.data() + off, n);
      off += n;
    }
  });
  std::vector<uint8_t> got(total);
  for (size_t off = 0; off < total;) {
    size_t n = std::min<size_t>(total - off, 1 + (off * 104729) % 200000);
    p.worker->recv(got.data() + off, n);
    off += n;
  }
  writer.join();
  EXPECT_TRUE(got == sent);
}

TEST(Shm, APeerThatGoesIsNoticedByAWaitingReader) {
  Pair p;
  sendBytes(*p.worker, "ab", 2);
  std::thread go([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    p.worker.reset();  // its process ends: the link closes
  });
  char got[4] = {};
  p.client->recv(got, 2);  // what was sent before is still read
  EXPECT_EQ(std::string(got, 2), "ab");
  EXPECT_THROW(p.client->recv(got, 1, true), TransportError);
  go.join();
}

TEST(Shm, ShutdownWakesABlockedReaderAndTellsThePeer) {
  Pair p;
  std::thread stop([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    p.client->shutdown();
  });
  char c;
  EXPECT_THROW(p.client->recv(&c, 1, true), TransportError);
  stop.join();
  EXPECT_THROW(p.worker->recv(&c, 1, true), TransportError);  // the peer sees the connection end
}

TEST(Shm, StallsEndAfterTheStallTimeout) {
  Pair p;
  p.worker->setStallTimeout(200);
  char c;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(p.worker->recv(&c, 1, false), TransportStalled);  // nothing came
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(190));
  std::vector<uint8_t> big(1u << 20);
  EXPECT_THROW(sendBytes(*p.worker, big.data(), big.size()), TransportStalled);  // nobody reads
}

TEST(Shm, APeerThatReadsNothingButKeepsWritingIsNotStalled) {
  Pair p;  // the worker busy with a long call: it reads nothing, and says it is alive
  p.client->setStallTimeout(200);
  p.worker->setStallTimeout(2000);  // a failure here ends the reader too, rather than hanging it
  std::atomic<bool> done{false};
  std::thread alive([&] {
    while (!done) {
      sendFrame(*p.worker, kMsgAlive, 0, 0, nullptr, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::vector<uint8_t> big(1u << 20);  // far more than the 64 KiB ring
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));  // then the worker reads it all
    std::vector<uint8_t> got(big.size());
    EXPECT_NO_THROW(p.worker->recv(got.data(), got.size()));
  });
  EXPECT_NO_THROW(sendBytes(*p.client, big.data(), big.size()));
  reader.join();
  done = true;
  alive.join();
}

TEST(Shm, CountersThePeerCorruptsNeverMoveACopyOutsideTheRing) {
  Pair p;
  // The client (here: the test, through its mapping) writes nonsense into the ring counters.
  size_t bytes = static_cast<size_t>(::lseek(p.client_segment, 0, SEEK_END));
  auto* base = static_cast<uint64_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, p.client_segment, 0));
  ASSERT_NE(base, MAP_FAILED);
  for (size_t i = 2; i < 4096 / 8; ++i) base[i] = ~uint64_t{0} - i;  // every counter after magic and size
  std::vector<uint8_t> into(1u << 20);
  p.worker->setStallTimeout(200);
  try {  // whatever it reads is garbage for the frame checks above; it must stay in bounds
    p.worker->recv(into.data(), into.size());
    sendBytes(*p.worker, into.data(), into.size());
  } catch (const TransportError&) {
  }
  ::munmap(base, bytes);
}

TEST(Shm, OnlyASealedGpoolSegmentIsMapped) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  ShmParts forged = createShmParts(64u << 10);
  ::close(forged.segment);
  forged.segment = ::memfd_create("forged", MFD_CLOEXEC);  // not sealed, not gpool's
  ASSERT_EQ(::ftruncate(forged.segment, 1 << 20), 0);
  EXPECT_THROW(openShmTransport(forged, kClientSide, sv[1], "worker"), TransportError);
  ::close(sv[0]);
}
