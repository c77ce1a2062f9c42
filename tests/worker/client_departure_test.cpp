// A worker whose client left while another process holds some of its memory (client_departure.cpp): it
// stays, charged for what is held, and keeps nothing else. Two sim workers of one lease, sharing its
// budget as gpool-server's workers do; the IPC handle's way is checked end to end (allocator.lease_flow).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "dispatcher.h"
#include "gpool/protocol/loopback_transport.h"
#include "shared_budget.h"
#include "sim_backend.h"
#include "test_client.h"

using namespace gpool;
using namespace gpool::proto;
namespace calls = gpool::proto::calls;

namespace {

// A worker of the lease whose budget it shares (in `slot`), which does what gpool-worker does once its
// client left: lets go of what no other process holds, then waits for them to let go of the rest.
struct LeaseWorker {
  std::unique_ptr<Transport> client, server;
  worker::SimBackend backend{worker::SimOptions{}};
  std::atomic<bool> staying{false}, ended{false};
  std::thread thread;
  LeaseWorker(std::shared_ptr<budget::SharedBudget> lease, int slot) {
    std::tie(client, server) = makeLoopbackPair({});
    HelloReply hello;
    backend.open(0, hello);
    const uint64_t limit = hello.devices.at(0).total_mem;
    thread = std::thread([this, lease, slot, limit] {
      worker::Dispatcher d(backend, *server, worker::MemoryLedger(limit, worker::SharedLimits{lease, nullptr, slot}));
      d.serve();
      if (d.importersHold()) {
        staying = true;
        d.waitForImporters();
      }
      ended = true;
    });
  }
  void leave() { client->shutdown(); }
  ~LeaseWorker() {
    client->shutdown();
    thread.join();
  }
};

// The line of /proc/self/maps for the mapping that starts at `address` (empty: none).
std::string mappingAt(uint64_t address) {
  std::ifstream maps("/proc/self/maps");
  std::ostringstream start;
  start << std::hex << address << '-';
  for (std::string line; std::getline(maps, line);)
    if (line.rfind(start.str(), 0) == 0) return line;
  return "";
}

bool waitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 1000; ++i, std::this_thread::sleep_for(std::chrono::milliseconds(10)))
    if (done()) return true;
  return false;
}

}  // namespace

// The departing client had: memory of its own (an allocation, mapped physical memory, an array, a graph
// allocation), a shared pool's
// allocation that the other process opened, and memory of the other's it had opened itself (physical
// memory it mapped, a pool allocation). Its worker keeps only what the other holds, charged to the lease.
TEST(ClientDeparture, AWorkerKeepsOnlyWhatAnotherProcessHolds) {
  const uint64_t mib = 1 << 20, g = 2 * mib;  // (g: the sim's physical granularity)
  auto lease = budget::SharedBudget::create(uint64_t{1} << 40);
  LeaseWorker ex(lease, 0), im(lease, 1);
  test::RawClient e(*ex.client), i(*im.client);

  ASSERT_EQ(e.call<calls::MemAlloc>(AllocBytes{4 * mib}).first, 0);
  auto [st, own] = e.call<calls::MemCreate>(g, 1u /*POSIX fd*/, 0u, 0u);
  ASSERT_EQ(st, 0);
  auto [st2, va] = e.call<calls::MemAddressReserve>(2 * g, uint64_t{0}, uint64_t{0}, uint64_t{0});
  ASSERT_EQ(st2, 0);
  const uint64_t base = std::get<0>(va).ptr;
  ASSERT_EQ(e.call<calls::MemMap>(VaMap{base, g, 0, std::get<0>(own).v}).first, 0);

  // An array, and a graph whose launch left its allocation live (charged as the device's graph reserve).
  constexpr uint32_t kFloat = 0x20;
  ASSERT_EQ(e.call<calls::ArrayCreate>(ArrayShape{256, 256, 0, kFloat, 1, 0}).first, 0);
  const uint64_t graph = std::get<0>(e.call<calls::GraphCreate>(0u).second).v;
  ASSERT_EQ(e.call<calls::GraphAddMemAllocNode>(graph, GraphNodes{}, GraphAllocBytes{mib}).first, 0);
  auto [st0, exec] = e.call<calls::GraphInstantiate>(graph, uint64_t{0});
  ASSERT_EQ(st0, 0);
  e.post<calls::GraphLaunch>(std::get<0>(exec).v, uint64_t{0});
  ASSERT_EQ(e.call<calls::CtxSynchronize>().first, 0);

  // e's pool allocation, which i opens.
  auto [st3, pool] = e.call<calls::MemPoolCreate>(1u /*pinned*/, 1u /*POSIX fd*/, uint64_t{0}, 0u);
  ASSERT_EQ(st3, 0);
  auto [st4, pooled] = e.call<calls::MemAllocFromPoolAsync>(mib, std::get<0>(pool).v, uint64_t{0});
  ASSERT_EQ(st4, 0);
  auto [st5, pool_handle] = e.call<calls::MemPoolExportShareable>(std::get<0>(pool).v, 1u);
  auto [st6, data] = e.call<calls::MemPoolExportPointer>(std::get<0>(pooled).ptr);
  ASSERT_EQ(st5 | st6, 0);
  auto [st7, ipool] = i.call<calls::MemPoolImportShareable>(std::get<0>(pool_handle), 1u);
  ASSERT_EQ(st7, 0);
  auto [st8, held] = i.call<calls::MemPoolImportPointer>(std::get<0>(ipool).v, std::get<0>(data));
  ASSERT_EQ(st8, 0);
  ASSERT_EQ(i.call<calls::Memset>(DevFill{std::get<0>(held).ptr, 1, 4096}, 7u, uint64_t{0}, 0u).first, 0);

  // i's physical memory, which e maps.
  auto [st9, theirs] = i.call<calls::MemCreate>(g, 1u, 0u, 0u);
  ASSERT_EQ(st9, 0);
  auto [st10, exported] = i.call<calls::MemExportShareable>(std::get<0>(theirs).v, 1u);
  ASSERT_EQ(st10, 0);
  auto [st11, imported] = e.call<calls::MemImportShareable>(std::get<0>(exported), 1u);
  ASSERT_EQ(st11, 0);
  ASSERT_EQ(e.call<calls::MemMap>(VaMap{base + g, g, 0, std::get<0>(imported).handle.v}).first, 0);
  ASSERT_NE(mappingAt(base + g).find("gpool-sim-physical"), std::string::npos) << mappingAt(base + g);

  const uint64_t before = lease->heldBy(0);
  EXPECT_GE(before, 4 * mib + g + 256 * 256 * 4 + mib + mib);
  ex.leave();
  ASSERT_TRUE(waitFor([&] { return ex.staying.load() && lease->heldBy(0) < before; })) << lease->heldBy(0);
  EXPECT_TRUE(waitFor([&] { return lease->heldBy(0) == mib; }))
      << "only the pool allocation i holds stays charged: " << lease->heldBy(0);
  EXPECT_EQ(mappingAt(base + g).find("gpool-sim-physical"), std::string::npos)
      << "e's worker no longer maps i's memory: " << mappingAt(base + g);
  EXPECT_EQ(mappingAt(base).find("gpool-sim-physical"), std::string::npos) << "nor its own: " << mappingAt(base);

  auto [st12, rows] = i.call<calls::MemcpyDtoH2D>(DevRect{std::get<0>(held).ptr, 4096, 4096, 1}, uint64_t{0});
  ASSERT_EQ(st12, 0);
  EXPECT_EQ(std::get<0>(rows), std::vector<uint8_t>(4096, 7)) << "what i holds is untouched";
  EXPECT_FALSE(ex.ended);
  EXPECT_EQ(i.call<calls::MemPoolFreeImported>(std::get<0>(held).ptr, uint64_t{0}).first, 0);
  EXPECT_TRUE(waitFor([&] { return ex.ended.load(); })) << "i let go: e's worker ends";
}
