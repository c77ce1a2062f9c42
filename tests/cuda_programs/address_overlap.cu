// Device memory whose worker-side addresses lie where this process has host memory of its own: on a GPU,
// the worker's driver places allocations in its own address space, which may cover a range the program
// registered here (a large arena, such as JAX's default preallocation, makes that likely). A kernel given a
// device address in that range is launched, not refused as if it had been given host memory.
// Run on sim with --sim-fixed-addresses: the worker's large allocations start at 0x300000000.
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <cstdint>
#include <vector>

#include "checks.h"
#include "increment.cuh"

int main() {
  constexpr uintptr_t kWorkerBase = 0x300000000;  // the sim's first large allocation (SimBackend::next_fixed_)
  constexpr size_t kMiB = 1 << 20, kArena = 64 * kMiB;
  // Host memory of this process, registered with CUDA, 1 MiB into where the arena will be.
  void* want = reinterpret_cast<void*>(kWorkerBase + kMiB);
  void* host = mmap(want, kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (host != want) {
    std::printf("SKIP  this process has no room at %p for the test's host memory\n", want);
    return 0;
  }
  CK(cudaSetDevice(0));
  CK(cudaHostRegister(host, kMiB, cudaHostRegisterDefault));
  unsigned* arena = nullptr;
  CK(cudaMalloc(&arena, kArena));
  char detail[96];
  std::snprintf(detail, sizeof detail, "arena at %p, host memory at %p", static_cast<void*>(arena), host);
  const bool overlaps = reinterpret_cast<uintptr_t>(arena) <= reinterpret_cast<uintptr_t>(host) &&
                        reinterpret_cast<uintptr_t>(host) < reinterpret_cast<uintptr_t>(arena) + kArena;
  check(overlaps, "the device arena covers the host memory's addresses", detail);

  // The words 1 MiB into the arena: their address is also the host memory's.
  const int n = 1024;
  unsigned* inside = arena + kMiB / sizeof(unsigned);
  CK(cudaMemset(arena, 0, 2 * kMiB));
  gpool_test_increment<<<n / 256, 256>>>(inside, n);
  cudaError_t launched = cudaGetLastError();
  check(launched == cudaSuccess, "a kernel given a device address that is also host memory's here is launched",
        cudaGetErrorName(launched));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(arena, inside, n * sizeof(unsigned), cudaMemcpyDeviceToDevice));
  std::vector<unsigned> back(n, 0);
  CK(cudaMemcpy(back.data(), arena, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  bool ran = true;
  for (unsigned v : back) ran &= v == 1;
  check(ran, "and it ran on the device's words");

  CK(cudaFree(arena));
  CK(cudaHostUnregister(host));
  munmap(host, kMiB);
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
