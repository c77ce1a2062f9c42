// Virtual memory management (cuMemCreate/AddressReserve/Map and friends), as PyTorch's expandable
// segments and NCCL use it: physical memory and address reservations live on the worker's device, which
// checks and charges them; this file keeps what the client may ask again locally (an allocation's
// properties, which handle a mapped address shows, access flags) and marks mapped ranges as device
// memory so copies and pointer attributes know them. Sharing handles between processes is
// api_shareable_handle.cpp.
#include <map>
#include <mutex>
#include <unordered_map>

#include "state.h"

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

void gpool::client::forgetVirtualMemory() {
  std::lock_guard lock(g_mu);
  g_physical.clear();
  g_mappings.clear();
}

GPOOL_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                    CUmemAllocationGranularity_flags option) {
  GPOOL_TRY
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkProp(prop)) return r;
  GPOOL_CONN(conn);
  calls::MemGetGranularity::out::tuple out;
  int st = conn->call<calls::MemGetGranularity>(out, static_cast<uint32_t>(option));
  if (st == CUDA_SUCCESS) *granularity = std::get<0>(out);
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
  GPOOL_TRY
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  calls::MemAddressReserve::out::tuple out;
  int st = conn->call<calls::MemAddressReserve>(out, uint64_t{size}, uint64_t{alignment}, uint64_t{addr}, uint64_t{flags});
  if (st == CUDA_SUCCESS) *ptr = std::get<0>(out).ptr;
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  GPOOL_TRY
  GPOOL_CONN(conn);
  return static_cast<CUresult>(conn->call<calls::MemAddressFree>(gpool::proto::VaRange{ptr, size}));
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                  unsigned long long flags) {
  GPOOL_TRY
  if (!handle || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkProp(prop)) return r;
  GPOOL_CONN(conn);
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
  GPOOL_CONN(conn);
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

GPOOL_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
  GPOOL_TRY
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  int st = conn->call<calls::MemMap>(gpool::proto::VaMap{ptr, size, offset, handle});
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  std::lock_guard lock(g_mu);
  g_mappings[ptr] = Mapping{size, handle};
  State::get().addAllocation(ptr, size, true);  // device memory from now on, for copies and attributes
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  GPOOL_TRY
  GPOOL_CONN(conn);
  int st = conn->call<calls::MemUnmap>(gpool::proto::VaUnmap{ptr, size});
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  std::lock_guard lock(g_mu);
  for (auto it = g_mappings.lower_bound(ptr); it != g_mappings.end() && it->first < ptr + size;) {
    State::get().removeAllocation(it->first);
    it = g_mappings.erase(it);
  }
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  GPOOL_TRY
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i)
    if (!isDeviceLocation(desc[i].location)) return CUDA_ERROR_INVALID_DEVICE;
  GPOOL_CONN(conn);
  unsigned flags = desc[count - 1].flags;  // one device per worker: the last word on it counts
  int st = conn->call<calls::MemSetAccess>(gpool::proto::VaMapped{ptr, size}, uint32_t{flags});
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  std::lock_guard lock(g_mu);
  for (auto it = g_mappings.lower_bound(ptr); it != g_mappings.end() && it->first < ptr + size; ++it) it->second.flags = flags;
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
  *flags = it->second.flags;
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
