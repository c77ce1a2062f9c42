// How the devices of one lease work together. Each device is another worker, often on another host, so
// what CUDA does inside one driver is done here, between connections:
// - a library (CUlibrary) is context-independent: loaded on one device, it is loaded on another the first
//   time one of its kernels is used there, and its kernels map to that device's copies;
// - a copy between two devices' memory goes directly between their workers when both are on one host:
//   the source allocation is opened in the destination's worker through CUDA IPC, and that worker copies.
//   Otherwise (other hosts, memory IPC cannot share, a driver that refuses) the source's worker sends the
//   bytes straight to the destination's over a link between the two (server/worker/peer_links.h), and
//   where the servers cannot reach each other the copy is relayed through this process;
// - a stream that waits for another device's event waits here until the event has completed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "state.h"  // cuda.h as the library includes it, and the connection

namespace gpool::client {

class CrossDevice : public ForeignHandles {
 public:
  // A library loaded on some device (its image is kept, to load it on the others), one of its kernels
  // (or a function got from one), and a library unloaded (its copies elsewhere: unload them too). A lease
  // of one device keeps no image, only which handles are one kernel (family).
  void noteLibrary(uint64_t library, const void* image, uint64_t size);
  void noteKernel(uint64_t kernel, uint64_t library, const std::string& name);
  void noteAlias(uint64_t handle, uint64_t kernel);
  std::vector<std::pair<int, uint64_t>> forgetLibrary(uint64_t library);

  uint64_t translate(Connection& here, uint64_t handle, tags::HandleClass what) override;
  // Whether `handle` is a library's kernel (CUkernel) on some device, rather than a function (CUfunction)
  // got from one.
  bool isKernel(uint64_t handle);
  // Every handle of the library kernel `handle` is one of: its copies on each device and the functions got
  // from them (empty: none known). Setting an attribute through one may change what the others read (a
  // kernel and its function in one context are one object to the driver).
  std::vector<uint64_t> family(uint64_t handle);

  // The address in `to`'s worker of `from`'s allocation at `base`, opened there through IPC (0: it cannot
  // be, and the copy is relayed).
  uint64_t openedIn(int from, uint64_t base, int to);
  // Before an allocation is freed, or a device reset: the mappings of it elsewhere are closed.
  void forgetAllocation(int owner, uint64_t base);
  void forgetConnection(int connection);

  // A server-to-server link from `from`'s worker to `to`'s, set up the first time (null: there is none,
  // and copies between them are relayed through this process). Copies over it take its lock: it carries
  // one at a time.
  struct PeerLink {
    std::mutex mu;
    uint32_t send = 0, receive = 0;  // the link's number in each worker
    bool broken = false;
  };
  std::shared_ptr<PeerLink> linkBetween(int from, int to);

 private:
  struct Library {
    std::vector<uint8_t> image;
    std::map<int, uint64_t> on;  // connection -> the library's handle there
  };
  struct Kernel {
    std::shared_ptr<Library> library;
    std::string name;
    std::map<int, uint64_t> on;
    std::vector<uint64_t> aliases;  // functions got from it (noteAlias)
  };
  uint64_t libraryOn(Connection& here, Library& lib);
  void closeLocked(int to, uint64_t mapped);
  std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Library>> libraries_;  // by any of its handles
  std::unordered_map<uint64_t, std::shared_ptr<Kernel>> kernels_;     // by any of its handles
  std::map<std::tuple<int, uint64_t, int>, uint64_t> opened_;          // (from, base, to) -> mapped there, 0: refused
  std::set<std::pair<int, int>> apart_;                                // (from, to): IPC refused, other hosts
  std::map<std::pair<int, int>, std::shared_ptr<PeerLink>> links_;      // (from, to) -> link; null: none
};

CrossDevice& crossDevice();

// A device-to-device copy between two connections' memory, in the order of `stream`. Direct (same host):
// on `stream` when it is the destination's (or a default stream), else after it; relayed: after the
// stream's earlier work and complete when this returns.
CUresult copyAcrossDevices(uint64_t dst, int to, uint64_t src, int from, uint64_t bytes, uint64_t stream, bool async);
// Whether `stream` and `event` are on two devices; if so, waits until the event has completed (the
// stream's later work is then after it, as cuStreamWaitEvent orders it).
bool waitAcrossDevices(uint64_t stream, uint64_t event, CUresult& result);

// Two workers of a lease are two processes whose addresses may coincide. Runs `allocate(ptr, bytes)` on
// `conn` until what it makes overlaps no other device's memory (at most 8 times); each overlapping one is
// held meanwhile, then handed to `release(ptr)`. So every device address names one device.
template <typename Allocate, typename Release>
CUresult allocateApart(Connection* conn, Allocate allocate, Release release, uint64_t& ptr, uint64_t& bytes) {
  State& state = State::get();
  std::vector<uint64_t> clashing;
  CUresult st = CUDA_SUCCESS;
  for (int attempt = 0; attempt < 8; ++attempt) {
    if ((st = allocate(ptr, bytes))) break;
    if (state.connections() < 2 || !state.clashesAcrossDevices(ptr, bytes, conn->index())) break;
    clashing.push_back(ptr);
    st = CUDA_ERROR_OUT_OF_MEMORY;  // should every attempt clash
  }
  for (uint64_t p : clashing) release(p);
  if (!clashing.empty())
    GPOOL_LOG(Level::kDebug, "%zu allocation(s) overlapped another device's memory and were made again", clashing.size());
  return st;
}

// Waits for a stream's earlier work, on the device it belongs to (a default stream: the current one's).
CUresult drainStream(uint64_t stream);
// Work (a copy, a graph's launch) on another device's stream than its own device's (`conn`): that stream's
// earlier work is waited for, and `stream` and `async` change so that the work runs on its own device,
// complete before the call returns (so also before the stream's later work).
CUresult onMemoryDevice(Connection* conn, uint64_t& stream, bool& async);

// Loads an image on one connection (api_module.cpp).
CUresult loadImageOn(Connection* conn, const void* image, uint64_t size, uint32_t kind, uint64_t& handle);

}  // namespace gpool::client
