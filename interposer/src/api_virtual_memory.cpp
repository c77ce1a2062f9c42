// Virtual memory management (cuMemCreate/AddressReserve/Map and friends), as PyTorch's expandable
// segments and NCCL use it: physical memory and address reservations live on the workers' devices, which
// check and charge them; this file keeps what the client may ask again locally (an allocation's
// properties, which handle a mapped address shows, access flags) and marks mapped ranges as device
// memory so copies and pointer attributes know them. In a lease of several devices, physical memory is
// made on the device its properties name, a reservation (the process's, in CUDA) is made in the current
// device's worker and again at the same addresses in each worker whose memory is mapped in it, and each
// mapping is its memory's worker's. Sharing handles between processes is api_shareable_handle.cpp.
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cross_device.h"  // allocateApart, and state.h

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

struct PhysicalInfo {
  CUmemAllocationProp prop;
  size_t size = 0;
  int refs = 1;  // cuMemCreate's, plus one per cuMemRetainAllocationHandle
};
struct Mapping {
  size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
  unsigned long long flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  int connection = 0;  // whose worker maps it: its memory's device's
};

std::mutex g_mu;
std::unordered_map<CUmemGenericAllocationHandle, PhysicalInfo> g_physical;
std::map<CUdeviceptr, Mapping> g_mappings;


// What the worker can honour: pinned device memory on one of the lease's devices.
CUresult checkProp(const CUmemAllocationProp* prop) {
  if (!prop || prop->win32HandleMetaData) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    GPOOL_LOG(Level::kWarn, "cuMemCreate: gpool provides device memory of the lease's GPU (type %d, location type %d refused)",
              static_cast<int>(prop->type), static_cast<int>(prop->location.type));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return isDeviceLocation(prop->location) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// The mapping that contains `p`, under g_mu.
std::map<CUdeviceptr, Mapping>::iterator mappingAt(CUdeviceptr p) {
  auto it = g_mappings.upper_bound(p);
  if (it == g_mappings.begin()) return g_mappings.end();
  --it;
  return p < it->first + it->second.size ? it : g_mappings.end();
}

// Calls C on the worker of connection `connection` (that connection's error where it is lost).
template <typename C, typename... A>
CUresult callOn(int connection, A&&... a) {
  CUresult st = CUDA_SUCCESS;
  Connection* conn = State::get().readyOn(connection, st);
  return conn ? static_cast<CUresult>(conn->call<C>(std::forward<A>(a)...)) : st;
}

// One device's adjacent mappings within a range.
struct Run {
  CUdeviceptr ptr = 0;
  size_t size = 0;
  int connection = 0;
};

// The runs that map [ptr, ptr+size), in address order; false unless mappings this library made cover every
// byte of it (the workers then check that they are whole).
bool mappedRuns(CUdeviceptr ptr, size_t size, std::vector<Run>& runs) {
  std::lock_guard lock(g_mu);
  auto it = mappingAt(ptr);
  CUdeviceptr end = ptr + size, at = ptr;
  for (; it != g_mappings.end() && at < end && it->first <= at; ++it) {
    CUdeviceptr upto = std::min<CUdeviceptr>(it->first + it->second.size, end);
    if (!runs.empty() && runs.back().connection == it->second.connection)
      runs.back().size += upto - at;
    else
      runs.push_back(Run{at, upto - at, it->second.connection});
    at = upto;
  }
  return size > 0 && at == end;
}

// CUDA_ERROR_INVALID_DEVICE where a descriptor gives a device access to another device's memory.
CUresult reachesOnlyOwn(const std::vector<Run>& runs, const CUmemAccessDesc* desc, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) continue;
    int reaching = State::get().connectionOf(desc[i].location.id);
    for (const Run& run : runs) {
      if (run.connection == reaching) continue;
      GPOOL_LOG(Level::kWarn, "cuMemSetAccess: device %d cannot reach device %d's memory at %#llx: a lease's devices are "
                "separate workers, without peer access (cuDeviceCanAccessPeer says 0); copy between them instead",
                desc[i].location.id, static_cast<int>(State::get().deviceOfConnection(run.connection)),
                static_cast<unsigned long long>(run.ptr));
      return CUDA_ERROR_INVALID_DEVICE;
    }
  }
  return CUDA_SUCCESS;
}

// Whether [ptr, ptr+size) is a whole reservation this library made, with nothing mapped in it.
bool wholeAndUnmapped(CUdeviceptr ptr, size_t size) {
  uint64_t base = 0, reserved = 0;
  std::vector<int> holders;
  if (!State::get().reservationAt(ptr, base, reserved, holders) || base != ptr || reserved != size) return false;
  std::lock_guard lock(g_mu);
  auto it = g_mappings.lower_bound(ptr);
  return mappingAt(ptr) == g_mappings.end() && (it == g_mappings.end() || it->first >= ptr + size);
}

// The reservation that holds `ptr` is made at the same addresses in `conn`'s worker the first time that
// worker's memory is mapped in it. Where that worker has something there already, the mapping is refused.
std::mutex g_holding;
CUresult holdReservationIn(Connection& conn, CUdeviceptr ptr) {
  std::lock_guard lock(g_holding);
  uint64_t base = 0, size = 0;
  std::vector<int> holders;
  if (!State::get().reservationAt(ptr, base, size, holders)) return CUDA_SUCCESS;  // the worker says what is wrong
  if (std::find(holders.begin(), holders.end(), conn.index()) != holders.end()) return CUDA_SUCCESS;
  calls::MemAddressReserve::out::tuple out;
  int st = conn.call<calls::MemAddressReserve>(out, size, uint64_t{0}, base, uint64_t{0});
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  if (uint64_t got = std::get<0>(out).ptr; got != base) {
    conn.call<calls::MemAddressFree>(gpool::proto::VaRange{got, size});
    GPOOL_LOG(Level::kWarn, "cuMemMap: device %d's worker has memory at %#llx (%llu bytes), so none of its memory can be "
              "mapped in that reservation; reserve addresses with device %d current for its memory",
              static_cast<int>(State::get().deviceOfConnection(conn.index())), static_cast<unsigned long long>(base),
              static_cast<unsigned long long>(size), static_cast<int>(State::get().deviceOfConnection(conn.index())));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  State::get().addReservationHolder(base, conn.index());
  return CUDA_SUCCESS;
}

}  // namespace

bool gpool::client::physicalProperties(CUmemGenericAllocationHandle h, CUmemAllocationProp& prop) {
  std::lock_guard lock(g_mu);
  auto it = g_physical.find(h);
  if (it == g_physical.end()) return false;
  prop = it->second.prop;
  return true;
}

void gpool::client::addImportedPhysical(CUmemGenericAllocationHandle h, const CUmemAllocationProp& prop, size_t size) {
  std::lock_guard lock(g_mu);
  auto [it, added] = g_physical.try_emplace(h, PhysicalInfo{prop, size});
  if (!added) ++it->second.refs;  // imported again: one more reference, as the driver counts it
}

void gpool::client::forgetVirtualMemory(int connection) {
  std::lock_guard lock(g_mu);
  std::erase_if(g_physical, [&](const auto& p) { return State::get().connectionOfHandle(p.first) == connection; });
  std::erase_if(g_mappings, [&](const auto& m) { return m.second.connection == connection; });
}

GPOOL_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                    CUmemAllocationGranularity_flags option) {
  GPOOL_TRY
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkProp(prop)) return r;
  GPOOL_CONN_OF_DEVICE(conn, prop->location.id);
  calls::MemGetGranularity::out::tuple out;
  int st = conn->call<calls::MemGetGranularity>(out, static_cast<uint32_t>(option));
  if (st == CUDA_SUCCESS) *granularity = std::get<0>(out);
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

// Made in the current device's worker, at addresses no other worker of the lease has memory at.
GPOOL_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
  GPOOL_TRY
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  auto reserve = [&](uint64_t& p, uint64_t&) {
    calls::MemAddressReserve::out::tuple out;
    int st = conn->call<calls::MemAddressReserve>(out, uint64_t{size}, uint64_t{alignment}, uint64_t{addr}, uint64_t{flags});
    if (st == CUDA_SUCCESS) p = std::get<0>(out).ptr;
    return static_cast<CUresult>(st);
  };
  auto unreserve = [&](uint64_t p) { conn->call<calls::MemAddressFree>(gpool::proto::VaRange{p, size}); };
  uint64_t p = 0, bytes = size;
  if (CUresult st = allocateApart(conn, reserve, unreserve, p, bytes)) return st;
  State::get().addReservation(p, size, conn->index());
  *ptr = p;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// Let go of in every worker that holds it. What is not a whole reservation of this library's with nothing
// mapped in it goes to the current device's worker, whose refusal is the answer.
GPOOL_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  GPOOL_TRY
  if (!wholeAndUnmapped(ptr, size)) {
    GPOOL_CONN(conn);
    return static_cast<CUresult>(conn->call<calls::MemAddressFree>(gpool::proto::VaRange{ptr, size}));
  }
  CUresult first = CUDA_SUCCESS;
  for (int holder : State::get().takeReservation(ptr)) {
    CUresult st = callOn<calls::MemAddressFree>(holder, gpool::proto::VaRange{ptr, size});
    if (first == CUDA_SUCCESS) first = st;
  }
  return first;
  GPOOL_CATCH
}

// On the device the properties name, whichever is current.
GPOOL_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                  unsigned long long flags) {
  GPOOL_TRY
  if (!handle || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkProp(prop)) return r;
  GPOOL_CONN_OF_DEVICE(conn, prop->location.id);
  calls::MemCreate::out::tuple out;
  int st = conn->call<calls::MemCreate>(out, uint64_t{size}, static_cast<uint32_t>(prop->requestedHandleTypes),
                                        uint32_t{prop->allocFlags.compressionType}, uint32_t{prop->allocFlags.usage});
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  *handle = std::get<0>(out).v;
  std::lock_guard lock(g_mu);
  g_physical[*handle] = PhysicalInfo{*prop, size};
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, uint64_t{handle});
  {
    std::lock_guard lock(g_mu);
    auto it = g_physical.find(handle);
    if (it == g_physical.end()) return CUDA_ERROR_INVALID_VALUE;
    if (--it->second.refs > 0) return CUDA_SUCCESS;  // a retained reference: the last release is the worker's
    g_physical.erase(it);
  }
  return static_cast<CUresult>(conn->call<calls::MemRelease>(uint64_t{handle}));
  GPOOL_CATCH
}

// In the worker of the memory's device, which holds the reservation from then on too.
GPOOL_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
  GPOOL_TRY
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, uint64_t{handle});
  if (CUresult r = holdReservationIn(*conn, ptr)) return r;
  int st = conn->call<calls::MemMap>(gpool::proto::VaMap{ptr, size, offset, handle});
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  std::lock_guard lock(g_mu);
  g_mappings[ptr] = Mapping{size, handle, CU_MEM_ACCESS_FLAGS_PROT_NONE, conn->index()};
  State::get().addAllocation(ptr, size, true, 0, conn->index());  // device memory from now on, for copies and attributes
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// Each device's mappings in the range are unmapped by its worker. A range this library mapped no byte of
// goes to the current device's worker, whose refusal is the answer.
GPOOL_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  GPOOL_TRY
  std::vector<Run> runs;
  if (!mappedRuns(ptr, size, runs)) {
    GPOOL_CONN(conn);
    return static_cast<CUresult>(conn->call<calls::MemUnmap>(gpool::proto::VaUnmap{ptr, size}));
  }
  for (const Run& run : runs) {
    if (CUresult st = callOn<calls::MemUnmap>(run.connection, gpool::proto::VaUnmap{run.ptr, run.size})) return st;
    std::lock_guard lock(g_mu);
    for (auto it = g_mappings.lower_bound(run.ptr); it != g_mappings.end() && it->first < run.ptr + run.size;) {
      State::get().removeAllocation(it->first);
      it = g_mappings.erase(it);
    }
  }
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// Each device reaches its own memory only (a lease's devices are separate workers, without peer access):
// each device's mappings in the range take the last word on that device, and read or write access for a
// device to another's memory is refused.
GPOOL_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  GPOOL_TRY
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i)
    if (!isDeviceLocation(desc[i].location)) return CUDA_ERROR_INVALID_DEVICE;
  std::vector<Run> runs;
  if (!mappedRuns(ptr, size, runs)) {
    GPOOL_CONN(conn);
    return static_cast<CUresult>(conn->call<calls::MemSetAccess>(gpool::proto::VaMapped{ptr, size}, uint32_t{desc[count - 1].flags}));
  }
  if (CUresult r = reachesOnlyOwn(runs, desc, count)) return r;
  for (const Run& run : runs) {
    std::optional<unsigned> flags;
    for (size_t i = 0; i < count; ++i)
      if (State::get().connectionOf(desc[i].location.id) == run.connection) flags = desc[i].flags;
    if (!flags) continue;
    if (CUresult st = callOn<calls::MemSetAccess>(run.connection, gpool::proto::VaMapped{run.ptr, run.size}, uint32_t{*flags}))
      return st;
    std::lock_guard lock(g_mu);
    for (auto it = g_mappings.lower_bound(run.ptr); it != g_mappings.end() && it->first < run.ptr + run.size; ++it)
      it->second.flags = *flags;
  }
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  GPOOL_TRY
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  if (!isDeviceLocation(*location)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(g_mu);
  auto it = mappingAt(ptr);
  if (it == g_mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  bool own = State::get().connectionOf(location->id) == it->second.connection;
  *flags = own ? it->second.flags : CU_MEM_ACCESS_FLAGS_PROT_NONE;  // (another device's memory: never reached)
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  GPOOL_TRY
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mu);
  auto it = g_physical.find(handle);
  if (it == g_physical.end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second.prop;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  GPOOL_TRY
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mu);
  auto it = mappingAt(reinterpret_cast<CUdeviceptr>(addr));
  if (it == g_mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  auto p = g_physical.find(it->second.handle);
  if (p == g_physical.end()) return CUDA_ERROR_INVALID_VALUE;  // released while mapped: nothing to retain
  ++p->second.refs;
  *handle = it->second.handle;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
