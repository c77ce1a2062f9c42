// The lease's memory cap holds on every allocation path. Run on a device (or lease) of 64 MiB: plain and
// pitched allocations stop at it, and freeing a module global (refused) never returns memory to the lease.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "checks.h"

__device__ int g_table[1024];  // a module global: the image's own memory, not the lease's

namespace {

constexpr size_t kCap = 64u << 20, kMiB = 1u << 20;


enum class Path { kPlain, kPitched, kAsync, kPool, kManaged };
const char* const kPathNames[] = {"cudaMalloc", "cudaMallocPitch", "cudaMallocAsync", "cudaMallocFromPoolAsync", "cudaMallocManaged"};

// Allocates 1 MiB blocks on one path until the device refuses; returns how many it got.
size_t fill(std::vector<void*>& held, Path path, cudaMemPool_t pool) {
  size_t got = 0;
  for (;;) {
    void* p = nullptr;
    size_t pitch = 0;
    cudaError_t e = path == Path::kPlain     ? cudaMalloc(&p, kMiB)
                    : path == Path::kPitched ? cudaMallocPitch(&p, &pitch, 1024, 1024)
                    : path == Path::kAsync   ? cudaMallocAsync(&p, kMiB, 0)
                    : path == Path::kPool    ? cudaMallocFromPoolAsync(&p, kMiB, pool, 0)
                                             : cudaMallocManaged(&p, kMiB);
    if (e != cudaSuccess) {
      char what[128];
      std::snprintf(what, sizeof what, "%s past the cap fails with cudaErrorMemoryAllocation", kPathNames[static_cast<int>(path)]);
      check(e == cudaErrorMemoryAllocation, what);
      cudaGetLastError();
      return got;
    }
    held.push_back(p);
    ++got;
  }
}

// Physical memory from cuMemCreate counts from creation; memory released while still mapped counts
// until its last mapping goes.
void vmm(size_t free0) {
  auto create = driverEntryPoint<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long)>("cuMemCreate");
  auto release = driverEntryPoint<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease");
  auto reserve = driverEntryPoint<CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long)>("cuMemAddressReserve");
  auto map = driverEntryPoint<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)>("cuMemMap");
  auto unmap = driverEntryPoint<CUresult (*)(CUdeviceptr, size_t)>("cuMemUnmap");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  const size_t g = 2 * kMiB;
  std::vector<CUmemGenericAllocationHandle> held;
  CUresult r;
  for (;;) {
    CUmemGenericAllocationHandle h = 0;
    if ((r = create(&h, g, &prop, 0)) != CUDA_SUCCESS) break;
    held.push_back(h);
  }
  char what[128];
  std::snprintf(what, sizeof what, "cuMemCreate stops at the cap (%zu MiB) with CUDA_ERROR_OUT_OF_MEMORY", held.size() * 2);
  check(r == CUDA_ERROR_OUT_OF_MEMORY && held.size() * g <= kCap && held.size() * g >= kCap - g, what);
  // Map the first one, release them all: only the mapped one still counts.
  CUdeviceptr va = 0;
  CK(reserve(&va, g, 0, 0, 0) == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown);
  check(map(va, g, 0, held[0], 0) == CUDA_SUCCESS, "one allocation mapped");
  for (auto h : held) release(h);
  size_t after = 0, total = 0;
  CK(cudaMemGetInfo(&after, &total));
  check(after == free0 - g, "released memory still mapped still counts");
  check(unmap(va, g) == CUDA_SUCCESS, "unmapped");
  CK(cudaMemGetInfo(&after, &total));
  check(after == free0, "the last unmap gives it back");
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  size_t free0 = 0, total = 0;
  CK(cudaMemGetInfo(&free0, &total));
  check(total == kCap, "the device reports the 64 MiB it may use");

  // Freeing the address of a module global is refused, however often it is tried.
  void* global = nullptr;
  CK(cudaGetSymbolAddress(&global, g_table));
  auto cuMemFree = driverEntryPoint<CUresult (*)(CUdeviceptr)>("cuMemFree");
  bool refused = true;
  for (int i = 0; i < 3; ++i) refused &= cuMemFree(reinterpret_cast<CUdeviceptr>(global)) == CUDA_ERROR_INVALID_VALUE;
  check(refused, "cuMemFree of a module global is refused each time");
  size_t free1 = 0;
  CK(cudaMemGetInfo(&free1, &total));
  check(free1 == free0, "refused frees return no memory to the lease");

  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  cudaMemPool_t pool;
  CK(cudaMemPoolCreate(&pool, &props));
  for (Path path : {Path::kPlain, Path::kPitched, Path::kAsync, Path::kPool, Path::kManaged}) {
    const char* name = kPathNames[static_cast<int>(path)];
    std::vector<void*> held;
    size_t got = fill(held, path, pool);
    char what[128];
    std::snprintf(what, sizeof what, "%s stops at the cap (%zu MiB)", name, got);
    check(got <= kCap / kMiB && got >= kCap / kMiB - 1, what);
    size_t after = 0;
    CK(cudaMemGetInfo(&after, &total));
    std::snprintf(what, sizeof what, "with the cap reached by %s, almost nothing is free", name);
    check(after < kMiB, what);
    for (void* p : held) {
      if (path == Path::kAsync || path == Path::kPool) CK(cudaFreeAsync(p, 0));
      else CK(cudaFree(p));
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemGetInfo(&after, &total));
    std::snprintf(what, sizeof what, "freeing what %s took gives it all back", name);
    check(after == free0, what);
  }
  CK(cudaMemPoolDestroy(pool));
  vmm(free0);
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
