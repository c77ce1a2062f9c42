// Process-wide state of the client library: the connection (made at cuInit), the device description
// it brought, contexts, and the caches that let most queries be answered without a round trip.
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1  // the library defines the versioned entry points itself
#include <cuda.h>

#include <atomic>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "address_space.h"
#include "connection.h"
#include "log.h"
#include "lease_shares.h"

#define GPOOL_EXPORT extern "C" __attribute__((visibility("default")))
// Every exported entry point's body sits between these: no exception crosses the C ABI.
#define GPOOL_TRY try {
#define GPOOL_CATCH                                                                     \
  }                                                                                     \
  catch (...) {                                                                         \
    return static_cast<CUresult>(::gpool::client::unexpectedException(__func__));       \
  }

namespace gpool::client {

struct Context {
  int device = 0;
  int refs = 0;            // primary context retain count
  unsigned flags = 0;
  unsigned long long id = 0;
  struct Slot {
    void* value;
    void (*dtor)(CUcontext, void*, void*);
  };
  std::map<void*, Slot> local_storage;  // the runtime's context-local storage (export table c693336e)
  // A green context's (api_green_context.cpp; its CUgreenCtx is this Context too): the worker's green
  // context, the stream that stands for its default stream while it is current, and its SMs. 0 otherwise.
  // Atomic: a thread that has the context current reads them while another destroys it.
  std::atomic<uint64_t> green = 0;
  std::atomic<uint64_t> green_stream = 0;
  unsigned green_sms = 0;
  std::atomic<bool> destroyed = false;  // by cuCtxDestroy or cuGreenCtxDestroy: kept for threads that still have it current
};

struct Allocation {
  uint64_t size;
  bool device;  // false: client host memory from cuMemHostAlloc/cuMemAllocHost/cuMemHostRegister
  unsigned flags = 0;  // host memory: the CU_MEMHOSTALLOC_* / CU_MEMHOSTREGISTER_* flags it was made with
  bool global = false;  // a module global: device memory that cuMemFree refuses
  uint64_t pool = 0;    // the memory pool a stream-ordered allocation came from
  bool managed = false;  // managed memory: host memory here and device memory there, same address
  int owner = 0;          // device memory: the connection whose worker holds it; shared host memory: whose pool
  bool shared = false;    // host memory in the owner's pool (host_pool.h): its worker reaches it at this address
  bool graph = false;     // a graph allocation node's address (or an allocation made while a capture ran)
  bool sync_memops = true;  // CU_POINTER_ATTRIBUTE_SYNC_MEMOPS as last set (gpool's synchronous copies always are)
};

// One share of the lease: a worker's address, the device it serves and the token that admits to it.
class State {
 public:
  static State& get();

  // Connects on first use to every share of the lease (GPOOL_SHARES, else GPOOL_SERVER); the result is
  // sticky, as cuInit's is. A lease of N shares is devices 0..N-1, in share order.
  CUresult init();
  Connection* conn() { return conns_.empty() ? nullptr : conns_[0].get(); }
  // The connection of the current context's device, or nullptr with `err` set (not initialised / lost).
  Connection* ready(CUresult& err) { return readyOn(currentConnection(), err); }
  // The same for a call on the current context itself: CUDA_ERROR_CONTEXT_IS_DESTROYED where another thread
  // destroyed it (the driver's answer).
  Connection* readyInContext(CUresult& err) {
    CUcontext c = current();
    if (c && reinterpret_cast<const Context*>(c)->destroyed) {
      err = CUDA_ERROR_CONTEXT_IS_DESTROYED;
      return nullptr;
    }
    return ready(err);
  }
  // The connection of one device, of the device a handle came from, of the device a pointer's memory is on
  // (the current one for anything else).
  Connection* readyOn(int connection, CUresult& err);
  Connection* readyForDevice(CUdevice d, CUresult& err) { return readyOn(connectionOf(d), err); }
  Connection* readyForHandle(uint64_t handle, CUresult& err);
  Connection* readyForPointer(uint64_t ptr, CUresult& err) { return readyOn(connectionOfPointer(ptr), err); }
  // Which connection serves a device, the current context's, a pointer's memory (-1: none of them).
  int connectionOf(CUdevice d) const;
  int currentConnection() const;
  int connectionOfPointer(uint64_t ptr);
  int connectionOfHandle(uint64_t handle) const;
  int connections() const { return static_cast<int>(conns_.size()); }
  // The device a handle belongs to (a default stream: the current context's).
  CUdevice deviceOfHandle(uint64_t handle) const;
  CUdevice deviceOfConnection(int connection) const;
  Connection* connection(int i) { return conns_[static_cast<size_t>(i)].get(); }

  int deviceCount() const { return static_cast<int>(devices_.size()); }
  const proto::DeviceInfo* device(CUdevice d) const;
  int attribute(CUdevice d, int attr) const;
  int driverVersion() const { return conns_.empty() ? CUDA_VERSION : static_cast<int>(conns_[0]->hello().driver_version); }

  Context* primary(CUdevice d) { return &primary_[static_cast<size_t>(d)]; }
  bool isContext(CUcontext c) const;
  bool isPrimary(CUcontext c) const;
  // Contexts made by cuCtxCreate. All of a device's contexts share the lease's worker context.
  CUcontext createContext(CUdevice d, unsigned flags);
  bool destroyContext(CUcontext c);  // false: not a created context
  // The calling thread's context stack (top = back): the current context.
  static std::vector<CUcontext>& ctxStack();
  CUcontext current() const { return ctxStack().empty() ? nullptr : ctxStack().back(); }
  // The current context's device (0 with no current context).
  CUdevice currentDevice() const { return current() ? reinterpret_cast<const Context*>(current())->device : 0; }
  // Runs the context-local storage destructors (context destroyed or primary context reset).
  void destroyLocalStorage(Context* c);

  // Allocation tracking for direction inference and pointer queries. Device memory is the current
  // device's unless `owner` names the connection whose worker made it.
  void addAllocation(uint64_t base, uint64_t size, bool device, unsigned flags = 0, int owner = -1);
  void addGlobal(uint64_t base, uint64_t size, int owner);
  void addManaged(uint64_t base, uint64_t size);  // its host pages are api_managed.cpp's, not reserved
  void addSharedHost(uint64_t base, uint64_t size, unsigned flags, int owner);  // page-locked, in owner's pool
  // The connection whose worker reaches all of [ptr, ptr+size) (shared host memory), or -1.
  int sharedHostOwner(uint64_t ptr, uint64_t size);
  // Host allocations live now: while there are none, launches skip the host-pointer check.
  std::atomic<int> host_allocations{0};
  void removeAllocation(uint64_t base);
  // Forgets the device allocation that starts at `base`; false when there is none (an interior
  // pointer, a module global, host memory, or nothing this client allocated). A graph allocation's
  // address stays (`graph` says so): its node allocates it again at the graph's next launch, until the
  // worker says it is gone (forgetGraphAllocations).
  bool takeDeviceAllocation(uint64_t base, bool* graph = nullptr);
  // Graph allocations' records, while there are any, and forgetting those of `owner` the worker gave up.
  std::atomic<int> graph_allocations{0};
  void forgetGraphAllocations(const std::vector<uint64_t>& gone, int owner);
  void addPoolAllocation(uint64_t base, uint64_t size, uint64_t pool, int owner);
  void addGraphAllocation(uint64_t base, uint64_t size, int owner);
  // A device's current memory pool as this client last learnt or set it (0: not asked yet), by connection.
  uint64_t currentPool(int connection) const { return current_pools_[static_cast<size_t>(connection)].load(); }
  void setCurrentPool(int connection, uint64_t pool) { current_pools_[static_cast<size_t>(connection)] = pool; }
  bool findAllocation(uint64_t ptr, uint64_t& base, Allocation& a);
  // Records cuPointerSetAttribute(SYNC_MEMOPS) on the device allocation holding `ptr`; false: none does.
  bool setSyncMemops(uint64_t ptr, bool on);
  // Whether [base, base+size) overlaps device memory of another connection's worker, or a reservation it
  // does not hold: two workers are two processes, and nothing but this check keeps their addresses apart
  // (cuMemAlloc allocates again).
  bool clashesAcrossDevices(uint64_t base, uint64_t size, int owner);
  // Address reservations (cuMemAddressReserve) are the process's, so the lease's: each is made in one
  // worker and made at the same addresses in each other worker whose memory is mapped in it; those are
  // its holders. Another worker's memory may not lie in it.
  void addReservation(uint64_t base, uint64_t size, int holder);
  bool reservationAt(uint64_t ptr, uint64_t& base, uint64_t& size, std::vector<int>& holders);
  void addReservationHolder(uint64_t base, int holder);
  std::vector<int> takeReservation(uint64_t base);  // its holders, in the order they reserved (none: no such)
  // The first of `count` 8-byte words (at any alignment in `words`) that points into client host memory
  // that connection `reaching`'s worker cannot reach, or 0; one lock for all of them (a launch's arguments
  // are checked on the hot path).
  uint64_t firstHostPointer(const uint8_t* words, size_t count, size_t& index, int reaching);

  // Per function/kernel caches. forgetFunctions drops them (a module was unloaded: the worker's driver
  // may give a new function the handle of an old one).
  void forgetFunctions();
  // A kernel's parameters, (offset, size) pairs. Shared and never changed once made: another thread may
  // ask for the same kernel's at the same time, or forget them, while this one packs a launch with them.
  using ParamLayout = std::shared_ptr<const std::vector<uint32_t>>;
  CUresult paramLayout(uint64_t f, ParamLayout& layout);
  // An attribute of `f` as the current device has it, or as `device` has it (a library's kernel is one
  // handle for every device, each of which may set its attributes apart).
  CUresult functionAttribute(uint64_t f, int attr, int& value, std::optional<CUdevice> device = std::nullopt);
  void forgetFunctionAttribute(uint64_t f, int attr);  // (on every device)
  // Occupancy answers (cuOccupancyMaxActiveBlocksPerMultiprocessor*) by function, block size, dynamic
  // shared memory, flags and the connection asked (a library kernel is one handle for every device, each
  // with its own attributes): they follow from the function's attributes alone, so each is asked once and
  // forgotten when an attribute or the cache configuration of the function changes. CUB asks at every
  // sort and scan, which would otherwise cost a round trip each.
  using OccupancyKey = std::tuple<uint64_t, int, uint64_t, unsigned, int>;
  bool occupancy(const OccupancyKey& k, int& blocks);
  void keepOccupancy(const OccupancyKey& k, int blocks);
  void forgetOccupancy(uint64_t f);  // 0: every function's
  // Names of functions and kernels, for cuFuncGetName/cuKernelGetName (pointers stay valid).
  void setFunctionName(uint64_t f, const std::string& name);
  const char* functionName(uint64_t f);

  struct StreamInfo {
    unsigned flags;
    int priority;
    CUcontext green = nullptr;  // the green context it was made in (its value only: it may be gone)
  };
  // A context reset: everything one connection's worker held for this client is gone, and so are the
  // caches of it (its device allocations and streams, functions, the current pool). Host memory stays.
  void forgetDeviceState(int connection);
  void addStream(uint64_t s, StreamInfo info);
  void removeStream(uint64_t s);
  bool streamInfo(uint64_t s, StreamInfo& info);

  // Stream captures begun and not yet ended: while none is, capture queries are answered locally.
  std::atomic<int> active_captures{0};

  std::mutex mu;  // guards everything below and the contexts

 private:
  State() = default;
  const Allocation* lookupLocked(uint64_t ptr, uint64_t& base) const;  // with mu held
  bool inDeviceMemoryLocked(uint64_t ptr) const;                         // with mu held
  bool clashesLocked(uint64_t base, uint64_t size, int owner) const;
  void insertLocked(uint64_t base, const Allocation& a, int owner = -1);
  std::map<uint64_t, Allocation>::iterator eraseLocked(std::map<uint64_t, Allocation>::iterator it);
  AddressSpace address_space_;  // device allocations' pages, reserved in this process
  std::once_flag once_;
  CUresult init_result_ = CUDA_ERROR_NOT_INITIALIZED;
  CUresult connectVisible(const std::vector<Share>& lease);
  static bool connectShares(const std::vector<Share>& lease, const std::vector<int>& positions,
                            std::vector<std::unique_ptr<Connection>>& conns);
  static void showDistinctUuids(const std::vector<Share>& lease, const std::vector<int>& positions,
                                std::vector<std::unique_ptr<Connection>>& conns);
  void adopt(std::vector<std::unique_ptr<Connection>> conns);
  std::vector<std::unique_ptr<Connection>> conns_;
  struct DeviceSlot {
    int connection;
    uint32_t local;  // the device's index in its worker's handshake
  };
  std::vector<DeviceSlot> devices_;
  std::unique_ptr<std::atomic<uint64_t>[]> current_pools_;
  std::vector<Context> primary_;
  std::list<Context> created_;  // stable addresses: a CUcontext is a Context*
  std::list<Context> retired_;  // destroyed ones, never freed: a thread may still have one current
  unsigned long long next_context_id_ = 1000;
  std::map<uint64_t, Allocation> allocations_;
  struct Reservation {
    uint64_t size;
    std::vector<int> holders;
  };
  std::map<uint64_t, Reservation> reservations_;
  std::unordered_map<uint64_t, ParamLayout> layouts_;
  std::map<std::tuple<uint64_t, int, int>, int> func_attrs_;  // (function, attribute, connection) -> value
  std::map<OccupancyKey, int> occupancy_;
  std::unordered_map<uint64_t, const std::string*> function_names_;
  std::deque<std::string> names_;  // every function name seen; stable addresses
  std::unordered_map<uint64_t, StreamInfo> streams_;
};

// A kernel launch packed as a graph node holds it (api_launch.cpp), for the graph of connection `reaching`;
// the packed bytes live in `storage`.
CUresult packKernelCall(uint64_t f, const unsigned grid[3], const unsigned block[3], unsigned shared, void** params, void** extra,
                        int reaching, proto::KernelCall& out, std::vector<uint8_t>& storage);
// Managed memory (api_managed.cpp): the hooks device work and synchronisation points call.
CUresult managedBeforeDeviceWork();
CUresult managedAtSync();
// Waits for `stream`'s work on `conn`'s worker, then gives managed memory back to the host (api_stream_event.cpp).
CUresult synchronizeOn(Connection* conn, uint64_t stream);
bool isManaged(uint64_t p);
bool freeManaged(uint64_t p, CUresult& result);
// A host function that runs whenever `conn`'s worker says so: for good (a graph's host node), or `once` (a
// user object's destructor). api_host_func.cpp.
CUresult hostFunctionId(Connection* conn, std::function<void()> fn, uint64_t& id, bool once = false);
// The function and argument of the cuLaunchHostFunc that host function `id` runs, while it may run (a
// captured one, for good); false for any other id.
bool hostFunctionOf(uint64_t id, CUhostFn& fn, void*& data);
// Asks `conn`'s worker which graph allocations' addresses are no longer this client's (after a graph or
// an instantiation is destroyed, or `freed`, addresses taken for graph allocations, were freed) and forgets
// them (api_graph_memory.cpp). Nothing is sent while there are no such records. Returns what the worker
// answered: an earlier asynchronous call's failure, which the API call that asked must report.
CUresult settleGraphAllocations(Connection* conn, std::vector<uint64_t> freed = {});
// Writes empty logs into the log buffers among JIT options (api_link.cpp).
void clearJitLogs(unsigned n, const CUjit_option* ids, void* const* values);
// After a context reset, the files that keep their own per-handle state forget it.
void forgetLinks();          // api_link.cpp
void forgetVirtualMemory(int connection);  // api_virtual_memory.cpp: a device reset, by its connection
// Physical memory the client knows (api_virtual_memory.cpp): its properties, and taking in memory another
// process exported (api_shareable_handle.cpp), with one reference as cuMemCreate's.
bool physicalProperties(CUmemGenericAllocationHandle h, CUmemAllocationProp& prop);
void addImportedPhysical(CUmemGenericAllocationHandle h, const CUmemAllocationProp& prop, size_t size);
// Frees `p` if it is memory opened from another process's pool (cuMemPoolImportPointer), in stream order
// (api_shareable_handle.cpp); false for any other pointer.
bool freeImportedPoolPointer(Connection* conn, uint64_t p, uint64_t stream, CUresult& result);
// Frees device memory at `p`, of `conn`'s worker, as cuMemFree and cuMemFreeAsync do (api_memory.cpp): memory
// opened from another process's pool closes in `stream`'s order; an allocation of this process's is
// forgotten and freed by `post` (MemFree or MemFreeAsync), a graph allocation's address kept until the
// worker says it is gone; anything else is refused with CUDA_ERROR_INVALID_VALUE.
CUresult freeDeviceMemory(Connection* conn, uint64_t p, uint64_t stream, const std::function<int()>& post);
void forgetArrays();         // api_array.cpp
void forgetTextures();       // api_texture.cpp

// Whether a memory location (pools, virtual memory, managed memory) is one of the lease's devices.
inline bool isDeviceLocation(const CUmemLocation& l) {
  return l.type == CU_MEM_LOCATION_TYPE_DEVICE && State::get().device(l.id) != nullptr;
}

// Green contexts (api_green_context.cpp). The green context stream `s` was made in (nullptr: none); for a
// default stream, the current context where it is green. False: a stream this library does not know.
bool greenOfStream(uint64_t s, CUcontext& green);
// A stream made in the current green context (cuStreamCreate while one is current); false: none is.
bool greenStreamCreate(CUstream* s, unsigned flags, int priority, CUresult& result);
// The stream that stands for the default stream while a green context is current (0: none is).
inline uint64_t greenDefaultStream() {
  CUcontext c = State::get().current();
  return c ? reinterpret_cast<const Context*>(c)->green_stream.load() : 0;
}
// Maps a stream argument: the default stream (NULL, legacy or per-thread) is the current green context's
// where one is current, and NULL is the per-thread default stream in a _ptds/_ptsz entry point.
inline uint64_t streamArg(CUstream s, bool per_thread) {
  auto v = reinterpret_cast<uint64_t>(s);
  if (v <= reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD))
    if (uint64_t green = greenDefaultStream()) return green;
  return (v == 0 && per_thread) ? reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD) : v;
}

}  // namespace gpool::client

// Declares `c`, the live connection of the current context's device, or returns the reason there is none
// (also: the current context was destroyed).
#define GPOOL_CONN(c)                                                   \
  CUresult gpool_err_ = CUDA_SUCCESS;                                   \
  ::gpool::client::Connection* c = ::gpool::client::State::get().readyInContext(gpool_err_); \
  if (!c) return gpool_err_
// The same for one device, and for the device a handle (stream, event...) or a pointer's memory belongs to.
#define GPOOL_CONN_OF_HANDLE(c, handle)                                  \
  CUresult gpool_err_ = CUDA_SUCCESS;                                   \
  ::gpool::client::Connection* c = ::gpool::client::State::get().readyForHandle(handle, gpool_err_); \
  if (!c) return gpool_err_
#define GPOOL_CONN_OF_DEVICE(c, d)                                       \
  CUresult gpool_err_ = CUDA_SUCCESS;                                   \
  ::gpool::client::Connection* c = ::gpool::client::State::get().readyForDevice(d, gpool_err_); \
  if (!c) return gpool_err_
#define GPOOL_CONN_OF_POINTER(c, ptr)                                    \
  CUresult gpool_err_ = CUDA_SUCCESS;                                   \
  ::gpool::client::Connection* c = ::gpool::client::State::get().readyForPointer(ptr, gpool_err_); \
  if (!c) return gpool_err_
