// Stream-ordered allocation and memory pools (cudaMallocAsync and cudaMemPool*): forwarded to the worker,
// whose pools live on its device; allocations are charged to the lease like cuMemAlloc. Sharing pools
// between processes is api_shareable_handle.cpp.
#include "cross_device.h"
#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

uint64_t raw(CUmemoryPool p) { return reinterpret_cast<uint64_t>(p); }
CUmemoryPool pool(uint64_t h) { return reinterpret_cast<CUmemoryPool>(h); }


// The device's current pool, asked once and then followed through cuDeviceSetMemPool. A failure is an
// earlier asynchronous call's, reported at this first wait: the caller's to return.
CUresult currentPool(Connection* conn, uint64_t& pool) {
  pool = State::get().currentPool(conn->index());
  if (pool) return CUDA_SUCCESS;
  calls::DeviceGetMemPool::out::tuple r;
  if (int st = conn->call<calls::DeviceGetMemPool>(r, 0u)) return static_cast<CUresult>(st);
  pool = std::get<0>(r).v;
  State::get().setCurrentPool(conn->index(), pool);
  return CUDA_SUCCESS;
}

CUresult allocAsync(CUdeviceptr* out, size_t bytes, uint64_t p, uint64_t stream, bool from_pool) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, from_pool ? p : stream);  // the pool's device, else the stream's
  if (!from_pool)
    if (CUresult r = currentPool(conn, p)) return r;
  uint64_t ptr = 0, size = bytes;
  auto allocate = [&](uint64_t& made, uint64_t&) {
    calls::MemAllocAsync::out::tuple r;
    int st = from_pool ? conn->call<calls::MemAllocFromPoolAsync>(r, uint64_t{bytes}, p, stream)
                       : conn->call<calls::MemAllocAsync>(r, uint64_t{bytes}, stream);
    made = std::get<0>(r).ptr;
    return static_cast<CUresult>(st);
  };
  auto release = [&](uint64_t made) { conn->post<calls::MemFreeAsync>(made, stream); };
  if (CUresult st = allocateApart(conn, allocate, release, ptr, size)) return st;
  *out = ptr;
  // Inside a capture it may be a graph's allocation node (the worker knows which stream captures): its
  // address outlives the free that follows.
  if (State::get().active_captures > 0) State::get().addGraphAllocation(ptr, bytes, conn->index());
  else State::get().addPoolAllocation(ptr, bytes, p, conn->index());
  return CUDA_SUCCESS;
}

CUresult freeAsync(CUdeviceptr p, uint64_t stream) {
  GPOOL_CONN_OF_POINTER(conn, p);
  if (p == 0) return CUDA_SUCCESS;
  if (State::get().active_captures > 0) {
    // Captured, the free is a free node, which frees graph allocations only: the worker's word decides
    // whether this process still has the memory.
    if (int st = conn->call<calls::MemFreeAsync>(uint64_t{p}, stream)) return static_cast<CUresult>(st);
    State::get().takeDeviceAllocation(p);
    return CUDA_SUCCESS;
  }
  return freeDeviceMemory(conn, p, stream, [&] { return conn->post<calls::MemFreeAsync>(uint64_t{p}, stream); });
}

CUresult getPool(CUmemoryPool* out, CUdevice d, uint32_t which) {
  if (!out || !State::get().device(d)) return out ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_DEVICE(conn, d);
  calls::DeviceGetMemPool::out::tuple r;
  int st = conn->call<calls::DeviceGetMemPool>(r, which);
  *out = st == CUDA_SUCCESS ? pool(std::get<0>(r).v) : nullptr;
  return static_cast<CUresult>(st);
}

// Reuse flags are ints, sizes and counters cuuint64_t.
bool intAttribute(CUmemPool_attribute a) { return a <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES; }

}  // namespace

GPOOL_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* out, size_t bytes, CUstream s) {
  GPOOL_TRY return allocAsync(out, bytes, 0, streamArg(s, false), false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* out, size_t bytes, CUstream s) {
  GPOOL_TRY return allocAsync(out, bytes, 0, streamArg(s, true), false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* out, size_t bytes, CUmemoryPool p, CUstream s) {
  GPOOL_TRY return allocAsync(out, bytes, raw(p), streamArg(s, false), true); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* out, size_t bytes, CUmemoryPool p, CUstream s) {
  GPOOL_TRY return allocAsync(out, bytes, raw(p), streamArg(s, true), true); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { GPOOL_TRY return freeAsync(p, streamArg(s, false)); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { GPOOL_TRY return freeAsync(p, streamArg(s, true)); GPOOL_CATCH }

GPOOL_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* out, const CUmemPoolProps* props) {
  GPOOL_TRY
  if (!out || !props || props->win32SecurityAttributes) return CUDA_ERROR_INVALID_VALUE;
  if (!isDeviceLocation(props->location)) {
    GPOOL_LOG(Level::kWarn, "cuMemPoolCreate: gpool pools live on the lease's device (location type %d refused)",
              static_cast<int>(props->location.type));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  GPOOL_CONN_OF_DEVICE(conn, props->location.id);  // the pool's device's worker
  calls::MemPoolCreate::out::tuple r;
  int st = conn->call<calls::MemPoolCreate>(r, static_cast<uint32_t>(props->allocType), static_cast<uint32_t>(props->handleTypes),
                                            uint64_t{props->maxSize}, uint32_t{props->usage});
  *out = st == CUDA_SUCCESS ? pool(std::get<0>(r).v) : nullptr;
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool p) {
  GPOOL_TRY GPOOL_CONN_OF_HANDLE(conn, raw(p)); return static_cast<CUresult>(conn->call<calls::MemPoolDestroy>(raw(p))); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* out, CUdevice d) { GPOOL_TRY return getPool(out, d, 1); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* out, CUdevice d) { GPOOL_TRY return getPool(out, d, 0); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuDeviceSetMemPool(CUdevice d, CUmemoryPool p) {
  GPOOL_TRY
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  GPOOL_CONN_OF_DEVICE(conn, d);
  int st = conn->call<calls::DeviceSetMemPool>(raw(p));
  if (st == CUDA_SUCCESS) State::get().setCurrentPool(conn->index(), raw(p));
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep) {
  GPOOL_TRY GPOOL_CONN_OF_HANDLE(conn, raw(p)); return static_cast<CUresult>(conn->post<calls::MemPoolTrimTo>(raw(p), uint64_t{keep})); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool p, CUmemPool_attribute attr, void* value) {
  GPOOL_TRY
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(p));
  uint64_t v = intAttribute(attr) ? static_cast<uint64_t>(*static_cast<int*>(value)) : *static_cast<cuuint64_t*>(value);
  return static_cast<CUresult>(conn->call<calls::MemPoolSetAttribute>(raw(p), gpool::proto::PoolAttribute{static_cast<uint32_t>(attr), v}));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool p, CUmemPool_attribute attr, void* value) {
  GPOOL_TRY
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(p));
  calls::MemPoolGetAttribute::out::tuple r;
  int st = conn->call<calls::MemPoolGetAttribute>(r, raw(p), static_cast<uint32_t>(attr));
  if (st) return static_cast<CUresult>(st);
  if (intAttribute(attr)) *static_cast<int*>(value) = static_cast<int>(std::get<0>(r));
  else *static_cast<cuuint64_t*>(value) = std::get<0>(r);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
// One device per lease worker: its pools are always accessible from it, and from nothing else here.
GPOOL_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool, const CUmemAccessDesc* map, size_t count) {
  GPOOL_TRY
  if (!map && count) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i)
    if (!isDeviceLocation(map[i].location)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool, CUmemLocation* location) {
  GPOOL_TRY
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  bool own = isDeviceLocation(*location);
  *flags = own ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// CUDA 13's pools by location: a device's pinned pools are the ones above; host and managed pools are
// memory of the GPU host's, which a program here cannot reach (CUDA_ERROR_NOT_SUPPORTED, said once).
namespace {
CUresult devicePoolLocation(const CUmemLocation* location, CUmemAllocationType type, CUdevice& d) {
  if (!location) return CUDA_ERROR_INVALID_VALUE;
  if (type == CU_MEM_ALLOCATION_TYPE_PINNED && location->type == CU_MEM_LOCATION_TYPE_DEVICE) {
    d = location->id;
    CUresult err;
    if (!State::get().ready(err)) return err;
    return State::get().device(d) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
  }
  bool known = (type == CU_MEM_ALLOCATION_TYPE_PINNED || type == CU_MEM_ALLOCATION_TYPE_MANAGED) &&
               location->type <= CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
  if (!known) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_LOG(Level::kWarn, "memory pools of host or managed memory are not supported by gpool: the GPU is on another "
            "machine (device pools work)");
  return CUDA_ERROR_NOT_SUPPORTED;
}
}  // namespace

namespace {
CUresult poolAt(CUmemoryPool* out, CUmemLocation* location, CUmemAllocationType type, uint32_t which) {
  CUdevice d = 0;
  if (CUresult r = devicePoolLocation(location, type, d)) return r;
  return getPool(out, d, which);
}
}  // namespace
GPOOL_EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool* out, CUmemLocation* location, CUmemAllocationType type) {
  GPOOL_TRY return poolAt(out, location, type, 1); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemGetMemPool(CUmemoryPool* out, CUmemLocation* location, CUmemAllocationType type) {
  GPOOL_TRY return poolAt(out, location, type, 0); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type, CUmemoryPool p) {
  GPOOL_TRY
  CUdevice d = 0;
  if (CUresult r = devicePoolLocation(location, type, d)) return r;
  return cuDeviceSetMemPool(d, p);
  GPOOL_CATCH
}
