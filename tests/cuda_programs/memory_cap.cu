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


// Allocates 1 MiB blocks (plain or pitched) until the device refuses; returns how many it got.
size_t fill(std::vector<void*>& held, bool pitched) {
  size_t got = 0;
  for (;;) {
    void* p = nullptr;
    size_t pitch = 0;
    cudaError_t e = pitched ? cudaMallocPitch(&p, &pitch, 1024, 1024) : cudaMalloc(&p, kMiB);
    if (e != cudaSuccess) {
      check(e == cudaErrorMemoryAllocation, pitched ? "the pitched allocation past the cap fails with cudaErrorMemoryAllocation"
                                                    : "the allocation past the cap fails with cudaErrorMemoryAllocation");
      cudaGetLastError();
      return got;
    }
    held.push_back(p);
    ++got;
  }
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

  std::vector<void*> held;
  size_t plain = fill(held, false);
  check(plain <= kCap / kMiB && plain >= kCap / kMiB - 1, "plain allocations stop at the cap");
  size_t after = 0;
  CK(cudaMemGetInfo(&after, &total));
  check(after < kMiB, "with the cap reached, almost nothing is free");
  for (void* p : held) CK(cudaFree(p));
  held.clear();
  CK(cudaMemGetInfo(&after, &total));
  check(after == free0, "freeing everything gives it all back");

  size_t pitched = fill(held, true);
  check(pitched <= kCap / kMiB && pitched >= kCap / kMiB - 1, "pitched allocations stop at the cap");
  for (void* p : held) CK(cudaFree(p));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
