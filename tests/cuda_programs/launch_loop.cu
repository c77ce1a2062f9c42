// Launches a kernel in a loop for the given seconds (default 3), synchronizing every 50 launches, then
// checks the count on the device: a job whose only sign of progress is its kernels (issue 15: gpool-server
// counts each lease's launches and the allocator measures its kind's launch rate from them).
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "increment.cuh"

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  unsigned* d = nullptr;
  if (cudaMalloc(&d, sizeof(unsigned)) != cudaSuccess || cudaMemset(d, 0, sizeof(unsigned)) != cudaSuccess) {
    std::printf("FAIL: cannot allocate\n");
    return 1;
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  unsigned launched = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (int k = 0; k < 50; ++k, ++launched) gpool_test_increment<<<1, 1>>>(d, 1);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      std::printf("FAIL: synchronize\n");
      return 1;
    }
  }
  unsigned counted = 0;
  cudaMemcpy(&counted, d, sizeof counted, cudaMemcpyDeviceToHost);
  std::printf("%s: %u launches, %u counted on the device\n", counted == launched ? "PASSED" : "FAIL", launched, counted);
  return counted == launched ? 0 : 1;
}
