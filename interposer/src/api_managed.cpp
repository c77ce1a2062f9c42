// Managed memory (cudaMallocManaged), emulated: each allocation is device memory on the worker and host
// memory here at the same address, kept coherent the way CUDA defines it for a device without concurrent
// managed access (the device reports CONCURRENT_MANAGED_ACCESS = 0, so programs follow these rules):
// the host may touch managed memory only while no device work it launched since its last
// synchronisation could be running. So:
// - before device work (a launch, a graph launch, a copy or memset of managed memory), when the host may
//   have written since the last synchronisation, every managed allocation is copied to the device;
// - at a synchronisation point (context, stream or event synchronise; a synchronous copy of managed
//   memory), every managed allocation is copied back.
// Cost: one copy of all managed memory each way per synchronisation epoch that launches work; nothing
// while a program has no managed memory. docs/user.md, "Managed memory".
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <set>
#include <mutex>

#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

struct Managed {
  uint64_t size = 0;         // the managed range [address, address + size), page-rounded for an allocation
  uint64_t device_base = 0;  // the worker's allocation that holds it (0: a library's managed variable)
};

std::mutex g_mu;
std::map<uint64_t, Managed> g_managed;
std::atomic<int> g_count{0};
bool g_host_epoch = true;  // the host may have written since the last synchronisation

uint64_t pageSize() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

// With g_mu held. Copies every managed allocation to the device.
CUresult pushLocked(Connection* conn) {
  for (const auto& [base, m] : g_managed) {
    for (uint64_t off = 0; off < m.size;) {
      uint64_t k = std::min<uint64_t>(m.size - off, gpool::proto::kBulkChunk);
      gpool::proto::DevWrite w{base + off, gpool::proto::Blob{reinterpret_cast<const void*>(base + off), k}};
      if (int st = conn->call<calls::MemcpyHtoD>(w, uint64_t{0}, 0u)) return static_cast<CUresult>(st);
      off += k;
    }
  }
  g_host_epoch = false;
  return CUDA_SUCCESS;
}

// With g_mu held. Copies every managed allocation back to the host.
CUresult pullLocked(Connection* conn) {
  for (const auto& [base, m] : g_managed)
    if (int st = conn->memcpyDtoH(reinterpret_cast<void*>(base), base, m.size, 0)) return static_cast<CUresult>(st);
  g_host_epoch = true;
  return CUDA_SUCCESS;
}

bool managedLocked(uint64_t p) {
  auto it = g_managed.upper_bound(p);
  if (it == g_managed.begin()) return false;
  --it;
  return p - it->first < it->second.size;
}

}  // namespace

CUresult gpool::client::managedBeforeDeviceWork() {
  if (g_count.load(std::memory_order_relaxed) == 0) return CUDA_SUCCESS;
  GPOOL_CONN(conn);
  std::lock_guard lock(g_mu);
  return g_host_epoch ? pushLocked(conn) : CUDA_SUCCESS;
}

CUresult gpool::client::managedAtSync() {
  if (g_count.load(std::memory_order_relaxed) == 0) return CUDA_SUCCESS;
  GPOOL_CONN(conn);
  std::lock_guard lock(g_mu);
  return g_host_epoch ? CUDA_SUCCESS : pullLocked(conn);
}

bool gpool::client::isManaged(uint64_t p) {
  if (g_count.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(g_mu);
  return managedLocked(p);
}

GPOOL_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  GPOOL_TRY
  if (!dptr || bytes == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  // Page-aligned inside a device allocation one page larger, so the host can map the same addresses.
  const uint64_t ps = pageSize(), size = (uint64_t{bytes} + ps - 1) / ps * ps;
  calls::MemAlloc::out::tuple r;
  if (int st = conn->call<calls::MemAlloc>(r, size + ps)) return static_cast<CUresult>(st);
  uint64_t device_base = std::get<0>(r).ptr, base = (device_base + ps - 1) / ps * ps;
  void* want = reinterpret_cast<void*>(base);
  void* got = mmap(want, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (got != want) {
    if (got != MAP_FAILED) munmap(got, size);
    conn->post<calls::MemFree>(device_base);
    GPOOL_LOG(Level::kWarn, "cudaMallocManaged: the device's address %#llx is taken in this process; managed memory "
              "needs the same address on both sides (returning CUDA_ERROR_NOT_SUPPORTED)", (unsigned long long)base);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  {
    std::lock_guard lock(g_mu);
    g_managed[base] = Managed{size, device_base};
    ++g_count;
    g_host_epoch = true;  // the new memory is the host's until device work needs it
  }
  State::get().addManaged(base, size);
  *dptr = base;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// A library's __managed__ variable (the runtime asks for each one as it registers the program's image): the
// worker's variable, and host memory here at the same address, kept coherent as an allocation is (above).
// Variables that share a page share its mapping; the copies cover each variable's own bytes only.
namespace {
std::set<uint64_t> g_variable_pages;  // pages mapped here for managed variables (with g_mu held)

// With g_mu held. Maps the pages that hold [p, p + n) at their own addresses, where not mapped yet.
bool mapVariableLocked(uint64_t p, uint64_t n) {
  const uint64_t ps = pageSize();
  for (uint64_t page = p / ps * ps; page < p + n; page += ps) {
    if (g_variable_pages.count(page)) continue;
    void* want = reinterpret_cast<void*>(page);
    void* got = mmap(want, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (got != want) {
      if (got != MAP_FAILED) munmap(got, ps);
      return false;
    }
    g_variable_pages.insert(page);
  }
  return true;
}
}  // namespace

GPOOL_EXPORT CUresult cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary lib, const char* name) {
  GPOOL_TRY
  if (!name || !lib) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, reinterpret_cast<uint64_t>(lib));
  calls::LibraryGetManaged::out::tuple r;
  if (int st = conn->call<calls::LibraryGetManaged>(r, gpool::proto::ModuleRef{reinterpret_cast<uint64_t>(lib), 1}, std::string(name)))
    return static_cast<CUresult>(st);
  const gpool::proto::ModuleGlobal g = std::get<0>(r);
  std::lock_guard lock(g_mu);
  if (!g_managed.count(g.ptr)) {
    if (!mapVariableLocked(g.ptr, g.bytes)) {
      GPOOL_LOG(Level::kWarn, "__managed__ variable %s: the device's address %#llx is taken in this process; managed memory "
                "needs the same address on both sides (returning CUDA_ERROR_NOT_SUPPORTED)", name, (unsigned long long)g.ptr);
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (int st = conn->memcpyDtoH(reinterpret_cast<void*>(g.ptr), g.ptr, g.bytes, 0)) return static_cast<CUresult>(st);  // its initial value
    g_managed[g.ptr] = Managed{g.bytes, 0};
    ++g_count;
    State::get().addManaged(g.ptr, g.bytes);
  }
  if (dptr) *dptr = g.ptr;
  if (bytes) *bytes = g.bytes;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// cuMemFree of managed memory (api_memory.cpp): true when `p` was managed and is now freed. A managed
// variable is its library's, never freed.
bool gpool::client::freeManaged(uint64_t p, CUresult& result) {
  if (g_count.load(std::memory_order_relaxed) == 0) return false;
  Managed m;
  {
    std::lock_guard lock(g_mu);
    auto it = g_managed.find(p);
    if (it == g_managed.end() || it->second.device_base == 0) return false;
    m = it->second;
    g_managed.erase(it);
    --g_count;
  }
  State::get().removeAllocation(p);
  munmap(reinterpret_cast<void*>(p), m.size);
  CUresult err = CUDA_SUCCESS;
  Connection* conn = State::get().ready(err);
  result = conn ? static_cast<CUresult>(conn->call<calls::MemFree>(m.device_base)) : err;  // (as cuMemFree: api_memory.cpp)
  return true;
}

// Prefetching to the device copies there now; to the host, back here now (CUDA overlaps it with the
// stream; here it is done before the call returns, which CUDA allows).
namespace {
CUresult prefetch(CUdeviceptr p, size_t n, CUmemLocation to) {
  if (!isManaged(p) || (n && !isManaged(p + n - 1))) return CUDA_ERROR_INVALID_VALUE;
  if (to.type == CU_MEM_LOCATION_TYPE_HOST) return managedAtSync();
  if (!isDeviceLocation(to)) return CUDA_ERROR_INVALID_DEVICE;
  return managedBeforeDeviceWork();
}
CUmemLocation location(CUdevice d) {
  return d == CU_DEVICE_CPU ? CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, 0} : CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, d};
}
}  // namespace
GPOOL_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation to, unsigned int, CUstream) {
  GPOOL_TRY return prefetch(p, n, to); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation to, unsigned int, CUstream) {
  GPOOL_TRY return prefetch(p, n, to); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice d, CUstream) { GPOOL_TRY return prefetch(p, n, location(d)); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice d, CUstream) { GPOOL_TRY return prefetch(p, n, location(d)); GPOOL_CATCH }

// Advice tunes where a driver places managed pages; the copies above do not depend on it.
GPOOL_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t, CUmem_advise advice, CUmemLocation) {
  GPOOL_TRY return isManaged(p) && advice >= CU_MEM_ADVISE_SET_READ_MOSTLY && advice <= CU_MEM_ADVISE_UNSET_ACCESSED_BY ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice d) { return cuMemAdvise_v2(p, n, advice, location(d)); }
GPOOL_EXPORT CUresult cuMemRangeGetAttribute(void* data, size_t bytes, CUmem_range_attribute attr, CUdeviceptr p, size_t) {
  GPOOL_TRY
  if (!data || !isManaged(p)) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY && bytes == 4) *static_cast<int*>(data) = 0;
  else if ((attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION || attr == CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION) && bytes == 4)
    *static_cast<int*>(data) = CU_DEVICE_INVALID;  // no preferred location; where it lives is not one device
  else return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
// Without concurrent managed access, attaching memory to a stream only narrows what a stream
// synchronisation makes visible; here every synchronisation makes all of it visible.
GPOOL_EXPORT CUresult cuStreamAttachMemAsync(CUstream, CUdeviceptr p, size_t, unsigned int flags) {
  GPOOL_TRY return isManaged(p) && flags <= CU_MEM_ATTACH_SINGLE ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr p, size_t n, unsigned int flags) {
  return cuStreamAttachMemAsync(s, p, n, flags);
}
// Several attributes at once: each as cuMemRangeGetAttribute answers it.
GPOOL_EXPORT CUresult cuMemRangeGetAttributes(void** data, size_t* sizes, CUmem_range_attribute* attrs, size_t n, CUdeviceptr p,
                                              size_t count) {
  GPOOL_TRY
  if (!data || !sizes || !attrs || n == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; ++i)
    if (CUresult r = cuMemRangeGetAttribute(data[i], sizes[i], attrs[i], p, count)) return r;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// Batched prefetch and discard need concurrent managed access, which this device reports it lacks:
// CUDA refuses them on such a device, and so does gpool.
namespace {
CUresult refuseBatch(const char* name) {
  GPOOL_LOG(Level::kWarn, "%s needs a device with concurrent managed access; gpool's managed memory is coherent at "
            "synchronisation points instead (CONCURRENT_MANAGED_ACCESS = 0, docs/user.md), so CUDA's answer is "
            "CUDA_ERROR_NOT_SUPPORTED: prefetch each range with cudaMemPrefetchAsync", name);
  return CUDA_ERROR_NOT_SUPPORTED;
}
}  // namespace
GPOOL_EXPORT CUresult cuMemPrefetchBatchAsync(CUdeviceptr*, size_t*, size_t, CUmemLocation*, size_t*, size_t, unsigned long long, CUstream) {
  return refuseBatch("cuMemPrefetchBatchAsync");
}
GPOOL_EXPORT CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr*, size_t*, size_t, CUmemLocation*, size_t*, size_t, unsigned long long, CUstream) {
  return refuseBatch("cuMemPrefetchBatchAsync");
}
GPOOL_EXPORT CUresult cuMemDiscardBatchAsync(CUdeviceptr*, size_t*, size_t, unsigned long long, CUstream) {
  return refuseBatch("cuMemDiscardBatchAsync");
}
GPOOL_EXPORT CUresult cuMemDiscardBatchAsync_ptsz(CUdeviceptr*, size_t*, size_t, unsigned long long, CUstream) {
  return refuseBatch("cuMemDiscardBatchAsync");
}
GPOOL_EXPORT CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr*, size_t*, size_t, CUmemLocation*, size_t*, size_t, unsigned long long, CUstream) {
  return refuseBatch("cuMemDiscardAndPrefetchBatchAsync");
}
GPOOL_EXPORT CUresult cuMemDiscardAndPrefetchBatchAsync_ptsz(CUdeviceptr*, size_t*, size_t, CUmemLocation*, size_t*, size_t, unsigned long long,
                                                             CUstream) {
  return refuseBatch("cuMemDiscardAndPrefetchBatchAsync");
}
