// Shared page-locked host memory (server/worker/host_pool.h): the pool segment comes with the move to
// shared memory, the worker maps it where the client says, and only registered pages of it are memory the
// client may name. Here worker and client share one process (the harness), so the window is an address
// this process has free, and the worker's mapping is the one both use.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

// A client moved to shared memory, holding the worker's pool segment.
struct Moved {
  test::Harness h;
  std::unique_ptr<Transport> shm;
  int pool = -1;
  uint64_t pool_bytes = 0;
  Moved() {
    std::vector<uint8_t> p;
    Writer(p).putAll(kTransportShm, shmHostIdentity());
    sendFrame(*h.client, kMsgSwitchTransport, kWantsReply, 1, p.data(), p.size());
    std::vector<uint8_t> reply;
    recvFrame(*h.client, reply, 4096);
    Status st = -1;
    std::string name;
    std::vector<uint8_t> token;
    Reader r(reply.data(), reply.size());
    EXPECT_TRUE(r.getAll(st, name, token) && st == 0);
    int link = connectAbstractSocket(name);
    EXPECT_EQ(::send(link, token.data(), token.size(), MSG_NOSIGNAL), 16);
    ShmParts parts;
    EXPECT_TRUE(recvShmParts(link, parts, 5000));
    pool = std::exchange(parts.pool, -1);
    struct stat s {};
    if (pool >= 0 && ::fstat(pool, &s) == 0) pool_bytes = static_cast<uint64_t>(s.st_size);
    shm = openShmTransport(parts, kClientSide, link, "worker");
  }
  ~Moved() {
    if (pool >= 0) ::close(pool);
    shm.reset();
    h.thread.join();
  }
};

// An address where this process has nothing for `bytes`, far from where the kernel places mappings by
// itself (so no thread of this process takes it before the worker maps it, as the client library does).
uint64_t freeAddress(uint64_t bytes) {
  static uint64_t next = 16ull << 40;
  for (;; next += 1ull << 40) {
    void* want = reinterpret_cast<void*>(next);
    void* p = ::mmap(want, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) continue;
    ::munmap(p, bytes);
    if (p != want) continue;
    uint64_t at = next;
    next += 1ull << 40;
    return at;
  }
}

}  // namespace

TEST(HostPool, ThePoolComesWithTheMoveSealedAgainstResizing) {
  Moved m;
  ASSERT_GE(m.pool, 0);
  EXPECT_GT(m.pool_bytes, 1ull << 30);
  EXPECT_NE(::ftruncate(m.pool, 4096), 0) << "a client could shrink the pool under the worker's mapping";
  int seals = ::fcntl(m.pool, F_GET_SEALS);
  EXPECT_TRUE(seals & F_SEAL_SEAL);
}

TEST(HostPool, RegisteredPagesAreMemoryCopiesMayName) {
  Moved m;
  test::RawClient c(*m.shm);
  uint64_t base = freeAddress(m.pool_bytes);
  ASSERT_EQ(c.call<calls::HostPoolAttach>(HostWindow{base, m.pool_bytes}).first, 0);
  uint64_t page = base + 8 * 4096;
  auto [a, dev] = c.call<calls::MemAlloc>(uint64_t{4096});
  ASSERT_EQ(a, 0);
  uint64_t d = std::get<0>(dev).ptr;
  // Not registered yet: the window alone is not memory the client may name.
  EXPECT_EQ(c.call<calls::MemcpyDtoD>(DevCopy{d, page, 6}, uint64_t{0}, 0u).first, cu::kInvalidValue);
  ASSERT_EQ(c.call<calls::HostPoolRegister>(HostRange{page, 2 * 4096}).first, 0);
  std::memcpy(reinterpret_cast<void*>(page), "pinned", 6);  // the worker's mapping: the same pages
  ASSERT_EQ(c.call<calls::MemcpyDtoD>(DevCopy{d, page, 6}, uint64_t{0}, 0u).first, 0);
  auto [rs, rows] = c.call<calls::MemcpyDtoH2D>(DevRect{d, 6, 6, 1}, uint64_t{0});
  ASSERT_EQ(rs, 0);
  EXPECT_EQ(std::string(std::get<0>(rows).begin(), std::get<0>(rows).end()), "pinned");
  // Device to host: into the second registered page.
  ASSERT_EQ(c.call<calls::MemcpyDtoD>(DevCopy{page + 4096, d, 6}, uint64_t{0}, 0u).first, 0);
  EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(page + 4096), "pinned", 6), 0);
  // Unregistered: no longer memory of the client's, and not twice.
  ASSERT_EQ(c.call<calls::HostPoolUnregister>(HostRangeBase{page}).first, 0);
  EXPECT_EQ(c.call<calls::MemcpyDtoD>(DevCopy{d, page, 6}, uint64_t{0}, 0u).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolUnregister>(HostRangeBase{page}).first, cu::kInvalidValue);
}

TEST(HostPool, AWindowThatIsNotThePoolsIsRefused) {
  Moved m;
  test::RawClient c(*m.shm);
  uint64_t base = freeAddress(m.pool_bytes);
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{base, 4096}).first, cu::kIllegalState);  // before any window
  EXPECT_EQ(c.call<calls::HostPoolAttach>(HostWindow{base + 1, m.pool_bytes}).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolAttach>(HostWindow{base, m.pool_bytes / 2}).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolAttach>(HostWindow{1ull << 47, m.pool_bytes}).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolAttach>(HostWindow{~0ull << 12, m.pool_bytes}).first, cu::kInvalidValue);
  // Where the worker has memory already (here: the test's own heap), it maps nothing over it.
  std::vector<uint8_t> mine(1 << 20, 7);
  uint64_t taken = reinterpret_cast<uint64_t>(mine.data()) & ~uint64_t{4095};
  EXPECT_EQ(c.call<calls::HostPoolAttach>(HostWindow{taken, m.pool_bytes}).first, cu::kInvalidValue);
  EXPECT_EQ(mine[4096], 7);
  ASSERT_EQ(c.call<calls::HostPoolAttach>(HostWindow{base, m.pool_bytes}).first, 0);
  EXPECT_EQ(c.call<calls::HostPoolAttach>(HostWindow{base, m.pool_bytes}).first, cu::kIllegalState);  // once
}

TEST(HostPool, RangesOutsideTheWindowUnalignedOrOverlappingAreRefused) {
  Moved m;
  test::RawClient c(*m.shm);
  uint64_t base = freeAddress(m.pool_bytes);
  ASSERT_EQ(c.call<calls::HostPoolAttach>(HostWindow{base, m.pool_bytes}).first, 0);
  auto [a, dev] = c.call<calls::MemAlloc>(uint64_t{4096});
  ASSERT_EQ(a, 0);
  uint64_t d = std::get<0>(dev).ptr;
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{d & ~uint64_t{4095}, 4096}).first, cu::kInvalidValue);  // device memory
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{base - 4096, 8192}).first, cu::kInvalidValue);  // sticks out below
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{base + m.pool_bytes - 4096, 8192}).first, cu::kInvalidValue);  // above
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{base + 100, 4096}).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{base, 100}).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{base, 0}).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{base + 4096, ~0ull << 12}).first, cu::kInvalidValue);
  ASSERT_EQ(c.call<calls::HostPoolRegister>(HostRange{base + 4096, 4 * 4096}).first, 0);
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{base, 2 * 4096}).first, cu::kInvalidValue);  // overlaps its start
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{base + 4 * 4096, 4096}).first, cu::kInvalidValue);  // its end
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{base + 5 * 4096, 4096}).first, 0);  // next to it
  // An interior pointer is no registered range, nor is device memory one.
  EXPECT_EQ(c.call<calls::HostPoolUnregister>(HostRangeBase{base + 2 * 4096}).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolUnregister>(HostRangeBase{d}).first, cu::kInvalidValue);
  // Nor can cuMemFree end one.
  EXPECT_EQ(c.call<calls::MemFree>(base + 4096).first, cu::kInvalidValue);
}

TEST(HostPool, AClientOverTcpHasNoPool) {
  test::Harness h;
  test::RawClient c(*h.client);
  uint64_t base = freeAddress(1ull << 30);
  EXPECT_EQ(c.call<calls::HostPoolAttach>(HostWindow{base, 1ull << 30}).first, cu::kIllegalState);
  EXPECT_EQ(c.call<calls::HostPoolRegister>(HostRange{base, 4096}).first, cu::kIllegalState);
}

// Another worker's pool, as the client mapped it: this worker keeps those addresses free of its own
// memory (so none of its device addresses is another device's page-locked host memory in the client).
TEST(HostPool, AnotherWorkersPoolIsKeptFreeHere) {
  Moved m;
  test::RawClient c(*m.shm);
  const uint64_t bytes = 1ull << 30;
  uint64_t theirs = freeAddress(bytes);
  ASSERT_EQ(c.call<calls::HostPoolKeepFree>(KeptFree{theirs, bytes}).first, 0);
  void* want = reinterpret_cast<void*>(theirs + bytes / 2);
  void* p = ::mmap(want, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  EXPECT_EQ(p, MAP_FAILED) << "the worker's process could still place memory there";
  if (p != MAP_FAILED) ::munmap(p, 4096);
  // Its own memory is not given up for it: where the worker has memory already, nothing is mapped over it,
  // and the free parts around it are kept.
  uint64_t around = freeAddress(bytes);
  void* mine = ::mmap(reinterpret_cast<void*>(around + bytes / 4), 1 << 20, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(mine, reinterpret_cast<void*>(around + bytes / 4));
  std::memset(mine, 7, 1 << 20);
  ASSERT_EQ(c.call<calls::HostPoolKeepFree>(KeptFree{around, bytes}).first, 0);
  EXPECT_EQ(static_cast<uint8_t*>(mine)[4096], 7);
  static_cast<uint8_t*>(mine)[4096] = 8;  // still the test's, writable
  for (uint64_t free_before : {around, around + bytes / 4 + (2 << 20), around + bytes - 4096}) {
    void* q = ::mmap(reinterpret_cast<void*>(free_before), 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    EXPECT_EQ(q, MAP_FAILED) << "a free part of the range at " << free_before - around << " was not kept";
    if (q != MAP_FAILED) ::munmap(q, 4096);
  }
  ::munmap(mine, 1 << 20);
  // Where all of it is the worker's already, nothing is kept.
  std::vector<uint8_t> heap(1 << 20, 7);
  uint64_t taken = (reinterpret_cast<uint64_t>(heap.data()) + 4095) & ~uint64_t{4095};
  EXPECT_EQ(c.call<calls::HostPoolKeepFree>(KeptFree{taken, 64 << 10}).first, cu::kInvalidValue);
  EXPECT_EQ(heap[8192], 7);
  // Whole pages of user space, no larger than a pool.
  EXPECT_EQ(c.call<calls::HostPoolKeepFree>(KeptFree{theirs + 1, bytes}).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolKeepFree>(KeptFree{theirs, 0}).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolKeepFree>(KeptFree{1ull << 47, 4096}).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolKeepFree>(KeptFree{(1ull << 47) - 4096, 8192}).first, cu::kInvalidValue);
  EXPECT_EQ(c.call<calls::HostPoolKeepFree>(KeptFree{theirs, 2ull << 40}).first, cu::kInvalidValue);
}
