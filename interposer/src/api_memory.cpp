// Memory: device allocations and copies go to the worker; page-locked host memory is emulated here
// (plain page-aligned host memory the client tracks, so copies know their direction).
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "state.h"  // first: cuda.h as the library includes it
#include "captured_copies.h"
#include "cross_device.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;
using gpool::proto::Blob;
using gpool::proto::HostRowsCopy;

namespace {

uint64_t dptr(CUdeviceptr p) { return static_cast<uint64_t>(p); }

// Between device memory and page-locked host memory the worker shares (host_pool.h): the worker's own
// copy, direct DMA, as asynchronous as the program asked.
CUresult sharedCopy(Connection* conn, uint64_t dst, uint64_t src, size_t n, uint64_t stream, bool async) {
  gpool::proto::DevCopy c{dst, src, uint64_t{n}};
  return static_cast<CUresult>(async ? conn->post<calls::MemcpyDtoD>(c, stream, 1u) : conn->call<calls::MemcpyDtoD>(c, stream, 0u));
}
bool shared(Connection* conn, uint64_t host, size_t n) { return State::get().sharedHostOwner(host, n) == conn->index(); }

// Host-to-device: chunks stream without replies; a synchronous copy waits for the last chunk's answer.
CUresult copyDtoD(uint64_t dst, uint64_t src, size_t n, uint64_t stream, bool async);

CUresult copyHtoD(uint64_t dst, const void* src, size_t n, uint64_t stream, bool async) {
  GPOOL_CONN_OF_POINTER(conn, dst);
  if (CUresult r = onMemoryDevice(conn, stream, async)) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!src) return CUDA_ERROR_INVALID_VALUE;
  auto s = reinterpret_cast<uint64_t>(src);
  if (isManaged(s) || isManaged(dst)) return copyDtoD(dst, s, n, stream, async);  // managed: the device's copy
  if (shared(conn, s, n)) return sharedCopy(conn, dst, s, n, stream, async);
  bool captured = false;
  if (CUresult r = captureHostCopy(conn, {HostRowsCopy::kToDevice, {dst, n, n, 1}}, s, n, stream, captured); r || captured) return r;
  const auto* p = static_cast<const uint8_t*>(src);
  for (size_t off = 0; off < n;) {
    size_t k = std::min<size_t>(n - off, gpool::proto::kBulkChunk);
    bool last = off + k == n;
    Blob b{p + off, k};
    gpool::proto::DevWrite w{dst + off, b};
    int st = (last && !async) ? conn->call<calls::MemcpyHtoD>(w, stream, 0u)
                              : conn->post<calls::MemcpyHtoD>(w, stream, async ? 1u : 0u);
    if (st) return static_cast<CUresult>(st);
    off += k;
  }
  return CUDA_SUCCESS;
}

// Device-to-host: completes before returning (an asynchronous copy may finish early), but for an
// asynchronous copy into shared page-locked memory, which the worker makes as asynchronous as CUDA does.
CUresult copyDtoH(void* dst, uint64_t src, size_t n, uint64_t stream, bool async = false) {
  GPOOL_CONN_OF_POINTER(conn, src);
  if (CUresult r = onMemoryDevice(conn, stream, async)) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!dst) return CUDA_ERROR_INVALID_VALUE;
  auto d = reinterpret_cast<uint64_t>(dst);
  if (isManaged(d) || isManaged(src)) return copyDtoD(d, src, n, stream, false);  // managed: the device's copy
  if (shared(conn, d, n)) return sharedCopy(conn, d, src, n, stream, async);
  bool captured = false;
  if (CUresult r = captureHostCopy(conn, {HostRowsCopy::kFromDevice, {src, n, n, 1}}, d, n, stream, captured); r || captured) return r;
  constexpr size_t kMaxReply = 1u << 30;
  auto* p = static_cast<uint8_t*>(dst);
  for (size_t off = 0; off < n;) {
    size_t k = std::min(n - off, kMaxReply);
    if (int st = conn->memcpyDtoH(p + off, src + off, k, stream)) return static_cast<CUresult>(st);
    off += k;
  }
  return CUDA_SUCCESS;
}

// Device work on managed memory (api_managed.cpp): the device's copy is brought up to date first, and a
// synchronous operation brings the host's up to date after it.
template <typename Op>
CUresult onManaged(uint64_t a, uint64_t b, bool async, Op op) {
  bool managed = isManaged(a) || isManaged(b);
  if (managed)
    if (CUresult r = managedBeforeDeviceWork()) return r;
  CUresult r = op();
  if (managed && !async && r == CUDA_SUCCESS) r = managedAtSync();
  return r;
}

CUresult copyDtoD(uint64_t dst, uint64_t src, size_t n, uint64_t stream, bool async) {
  State& state = State::get();
  if (int to = state.connectionOfPointer(dst), from = state.connectionOfPointer(src); to != from)
    return copyAcrossDevices(dst, to, src, from, n, stream, async);
  GPOOL_CONN_OF_POINTER(conn, dst);
  if (CUresult r = onMemoryDevice(conn, stream, async)) return r;
  gpool::proto::DevCopy c{dst, src, uint64_t{n}};
  return onManaged(dst, src, async, [&] {
    return static_cast<CUresult>(async ? conn->post<calls::MemcpyDtoD>(c, stream, 1u) : conn->call<calls::MemcpyDtoD>(c, stream, 0u));
  });
}

CUresult memset(uint64_t dst, uint32_t value, uint32_t elem, size_t count, uint64_t stream, bool async) {
  GPOOL_CONN_OF_POINTER(conn, dst);
  if (CUresult r = onMemoryDevice(conn, stream, async)) return r;
  gpool::proto::DevFill f{dst, elem, uint64_t{count}};
  return onManaged(dst, 0, async, [&] {
    return static_cast<CUresult>(async ? conn->post<calls::Memset>(f, value, stream, 1u) : conn->call<calls::Memset>(f, value, stream, 0u));
  });
}

bool isDevice(uint64_t p) {
  uint64_t base;
  Allocation a;
  return State::get().findAllocation(p, base, a) && a.device;
}

// cuMemcpy/cuMemcpyAsync with unified addressing: the direction follows from what each pointer is.
CUresult copyAny(uint64_t dst, uint64_t src, size_t n, uint64_t stream, bool async) {
  bool d_dev = isDevice(dst), s_dev = isDevice(src);
  if (d_dev && s_dev) return copyDtoD(dst, src, n, stream, async);
  if (d_dev) return copyHtoD(dst, reinterpret_cast<const void*>(src), n, stream, async);
  if (s_dev) return copyDtoH(reinterpret_cast<void*>(dst), src, n, stream, async);
  if (n) std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

void* hostAlloc(size_t n) {
  size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* p = nullptr;
  if (posix_memalign(&p, page, std::max<size_t>(n, 1)) != 0) return nullptr;
  return p;
}

}  // namespace

// Allocates on the current device's worker, apart from the other devices' memory (cross_device.h).
GPOOL_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* out, size_t bytes) {
  GPOOL_TRY
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  uint64_t p = 0, size = bytes;
  auto allocate = [&](uint64_t& ptr, uint64_t&) {
    calls::MemAlloc::out::tuple r;
    int st = conn->call<calls::MemAlloc>(r, uint64_t{bytes});
    ptr = std::get<0>(r).ptr;
    return static_cast<CUresult>(st);
  };
  CUresult st = allocateApart(conn, allocate, [&](uint64_t ptr) { conn->post<calls::MemFree>(ptr); }, p, size);
  if (st) return st;
  *out = p;
  State::get().addAllocation(p, bytes, true);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  GPOOL_TRY
  if (p == 0) return CUDA_SUCCESS;
  GPOOL_CONN_OF_POINTER(conn, p);
  CUresult managed = CUDA_SUCCESS;
  if (freeManaged(p, managed)) return managed;
  // It returns once the memory is free, as CUDA's does (which waits for the device): another process of the
  // lease that this one then tells may allocate it. (cuMemFreeAsync stays in stream order, unwaited.)
  return freeDeviceMemory(conn, p, 0, [&] { return conn->call<calls::MemFree>(dptr(p)); });
  GPOOL_CATCH
}

CUresult gpool::client::freeDeviceMemory(Connection* conn, uint64_t p, uint64_t stream, const std::function<int()>& post) {
  if (CUresult imported = CUDA_SUCCESS; freeImportedPoolPointer(conn, p, stream, imported)) return imported;
  // Refused here at once, as the driver refuses it, rather than later from the worker's latch.
  bool graph = false;
  if (!State::get().takeDeviceAllocation(p, &graph)) return CUDA_ERROR_INVALID_VALUE;
  crossDevice().forgetAllocation(conn->index(), p);  // its mappings in the lease's other workers
  auto st = static_cast<CUresult>(post());
  if (st == CUDA_SUCCESS && graph) st = settleGraphAllocations(conn, {p});
  return st;
}

GPOOL_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  GPOOL_TRY
  GPOOL_CONN(conn);
  calls::MemGetInfo::out::tuple r;
  int st = conn->call<calls::MemGetInfo>(r);
  if (free_bytes) *free_bytes = std::get<0>(r).free;
  if (total) *total = std::get<0>(r).total;
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  GPOOL_TRY
  GPOOL_CONN_OF_POINTER(conn, p);
  calls::PointerGetBase::out::tuple r;
  int st = conn->call<calls::PointerGetBase>(r, dptr(p));
  if (st) return static_cast<CUresult>(st);
  if (base) *base = std::get<0>(r).base;
  if (size) *size = std::get<0>(r).bytes;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// Page-locked host memory. With unified addressing a host allocation's device pointer is its own address.
// On a connection that shares memory with its worker it comes from the worker's pool (host_pool.h): truly
// page-locked there, and kernels reach it. Otherwise it is emulated: copies through it work as CUDA
// documents; a kernel cannot reach it (see api_launch.cpp).
GPOOL_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  GPOOL_TRY
  if (!pp || (flags & ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)))
    return CUDA_ERROR_INVALID_VALUE;
  State& state = State::get();
  CUresult err = CUDA_SUCCESS;
  Connection* conn = state.ready(err);
  HostPool* pool = conn ? conn->hostPool() : nullptr;
  if (void* p = pool ? pool->allocate(*conn, bytes) : nullptr) {
    state.addSharedHost(reinterpret_cast<uint64_t>(p), bytes, flags | CU_MEMHOSTALLOC_DEVICEMAP, conn->index());
    *pp = p;
    return CUDA_SUCCESS;
  }
  void* p = hostAlloc(bytes);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  state.addAllocation(reinterpret_cast<uint64_t>(p), bytes, false, flags | CU_MEMHOSTALLOC_DEVICEMAP);
  *pp = p;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytes) { return cuMemHostAlloc(pp, bytes, 0); }

GPOOL_EXPORT CUresult cuMemFreeHost(void* p) {
  GPOOL_TRY
  uint64_t base;
  Allocation a;
  if (!State::get().findAllocation(reinterpret_cast<uint64_t>(p), base, a) || a.device || base != reinterpret_cast<uint64_t>(p))
    return CUDA_ERROR_INVALID_VALUE;
  State::get().removeAllocation(base);
  if (a.shared) {  // the worker's pool's pages, never the heap's
    Connection* conn = State::get().connection(a.owner);
    conn->hostPool()->release(*conn, p);
    return CUDA_SUCCESS;
  }
  std::free(p);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  GPOOL_TRY
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CU_MEMHOSTREGISTER_IOMEMORY) return CUDA_ERROR_NOT_SUPPORTED;  // device I/O memory cannot be forwarded
  uint64_t base;
  Allocation a;
  if (State::get().findAllocation(reinterpret_cast<uint64_t>(p), base, a) ||
      State::get().findAllocation(reinterpret_cast<uint64_t>(p) + bytes - 1, base, a))
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  State::get().addAllocation(reinterpret_cast<uint64_t>(p), bytes, false, flags | CU_MEMHOSTREGISTER_DEVICEMAP);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* out, void* p, unsigned int flags) {
  GPOOL_TRY
  if (!out || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t base;
  Allocation a;
  if (!State::get().findAllocation(reinterpret_cast<uint64_t>(p), base, a) || a.device) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemHostUnregister(void* p) {
  GPOOL_TRY
  uint64_t base;
  Allocation a;
  if (!State::get().findAllocation(reinterpret_cast<uint64_t>(p), base, a) || a.device || a.shared)  // cuMemHostAlloc's
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  State::get().removeAllocation(base);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemHostGetFlags(unsigned int* flags, void* p) {
  GPOOL_TRY
  uint64_t base;
  Allocation a;
  if (!flags || !State::get().findAllocation(reinterpret_cast<uint64_t>(p), base, a) || a.device) return CUDA_ERROR_INVALID_VALUE;
  *flags = a.flags;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// Copies. The _ptds/_ptsz variants differ only in what stream 0 means.
GPOOL_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  GPOOL_TRY return copyHtoD(dst, src, n, 0, false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  GPOOL_TRY return copyHtoD(dst, src, n, streamArg(nullptr, true), false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  GPOOL_TRY return copyHtoD(dst, src, n, streamArg(s, false), true); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  GPOOL_TRY return copyHtoD(dst, src, n, streamArg(s, true), true); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  GPOOL_TRY return copyDtoH(dst, src, n, 0); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  GPOOL_TRY return copyDtoH(dst, src, n, streamArg(nullptr, true)); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  GPOOL_TRY return copyDtoH(dst, src, n, streamArg(s, false), true); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  GPOOL_TRY return copyDtoH(dst, src, n, streamArg(s, true), true); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  GPOOL_TRY return copyDtoD(dst, src, n, 0, false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  GPOOL_TRY return copyDtoD(dst, src, n, streamArg(nullptr, true), false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  GPOOL_TRY return copyDtoD(dst, src, n, streamArg(s, false), true); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  GPOOL_TRY return copyDtoD(dst, src, n, streamArg(s, true), true); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  GPOOL_TRY return copyAny(dst, src, n, 0, false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  GPOOL_TRY return copyAny(dst, src, n, streamArg(nullptr, true), false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  GPOOL_TRY return copyAny(dst, src, n, streamArg(s, false), true); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  GPOOL_TRY return copyAny(dst, src, n, streamArg(s, true), true); GPOOL_CATCH
}

// Peer copies: the pointers say which devices (unified addressing); between two devices of the lease
// the copy is relayed (cross_device.h), within one it is a device-to-device copy on its worker.
namespace {
CUresult copyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, uint64_t stream, bool async) {
  if (!State::get().isContext(dctx) || !State::get().isContext(sctx)) return CUDA_ERROR_INVALID_CONTEXT;
  return copyDtoD(dst, src, n, stream, async);
}
}  // namespace
GPOOL_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) {
  GPOOL_TRY return copyPeer(dst, dctx, src, sctx, n, 0, false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) {
  GPOOL_TRY return copyPeer(dst, dctx, src, sctx, n, streamArg(nullptr, true), false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s) {
  GPOOL_TRY return copyPeer(dst, dctx, src, sctx, n, streamArg(s, false), true); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s) {
  GPOOL_TRY return copyPeer(dst, dctx, src, sctx, n, streamArg(s, true), true); GPOOL_CATCH
}

// Batched copies (CUDA 12.8/13): the batch runs in stream order, each copy in the direction its pointers
// say; the attributes only hint at access order and locations, which one stream already orders.
namespace {
CUresult copyBatch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, size_t* fail, uint64_t stream) {
  if (fail) *fail = SIZE_MAX;
  if (count == 0 || !dsts || !srcs || !sizes) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (CUresult r = copyAny(dsts[i], srcs[i], sizes[i], stream, true)) {
      if (fail) *fail = i;
      return r;
    }
  }
  return CUDA_SUCCESS;
}
}  // namespace
GPOOL_EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes*,
                                         size_t*, size_t, size_t* fail, CUstream s) {
  GPOOL_TRY return copyBatch(dsts, srcs, sizes, count, fail, streamArg(s, false)); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes*,
                                              size_t*, size_t, size_t* fail, CUstream s) {
  GPOOL_TRY return copyBatch(dsts, srcs, sizes, count, fail, streamArg(s, true)); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes*,
                                            size_t*, size_t, CUstream s) {
  GPOOL_TRY return copyBatch(dsts, srcs, sizes, count, nullptr, streamArg(s, false)); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes*,
                                                 size_t*, size_t, CUstream s) {
  GPOOL_TRY return copyBatch(dsts, srcs, sizes, count, nullptr, streamArg(s, true)); GPOOL_CATCH
}

// Memsets: D8/D16/D32, synchronous and asynchronous, each with its per-thread variant.
#define GPOOL_MEMSET(bits, type)                                                                      \
  GPOOL_EXPORT CUresult cuMemsetD##bits##_v2(CUdeviceptr d, type v, size_t n) {                     \
    GPOOL_TRY return memset(d, v, bits / 8, n, 0, false); GPOOL_CATCH                                \
  }                                                                                                 \
  GPOOL_EXPORT CUresult cuMemsetD##bits##_v2_ptds(CUdeviceptr d, type v, size_t n) {                \
    GPOOL_TRY return memset(d, v, bits / 8, n, streamArg(nullptr, true), false); GPOOL_CATCH         \
  }                                                                                                 \
  GPOOL_EXPORT CUresult cuMemsetD##bits##Async(CUdeviceptr d, type v, size_t n, CUstream s) {       \
    GPOOL_TRY return memset(d, v, bits / 8, n, streamArg(s, false), true); GPOOL_CATCH               \
  }                                                                                                 \
  GPOOL_EXPORT CUresult cuMemsetD##bits##Async_ptsz(CUdeviceptr d, type v, size_t n, CUstream s) {  \
    GPOOL_TRY return memset(d, v, bits / 8, n, streamArg(s, true), true); GPOOL_CATCH                \
  }
GPOOL_MEMSET(8, unsigned char)
GPOOL_MEMSET(16, unsigned short)
GPOOL_MEMSET(32, unsigned int)

GPOOL_EXPORT CUresult cuMemHostRegister(void* p, size_t bytes, unsigned int flags) { return cuMemHostRegister_v2(p, bytes, flags); }
