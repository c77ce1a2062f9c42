// Launches a loaded gpool_test_increment (increment.cuh's kernel, from a module, a library or a JIT link)
// over 1000 words and checks each went up by one. On sim, sim_kernels.cpp runs the kernel by its name, so
// the values are checked there too.
#pragma once

#include <cuda.h>

#include <vector>

#include "checks.h"

// `f`: a CUfunction, or a library's CUkernel (cuLaunchKernel takes either).
static bool runIncrement(CUfunction f, unsigned base) {
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                                void**, void**);
  auto launch = driverEntryPoint<LaunchFn>("cuLaunchKernel");
  const int n = 1000;
  std::vector<unsigned> h(n);
  for (int i = 0; i < n; ++i) h[i] = base + i;
  unsigned* d = nullptr;
  CK(cudaMalloc(&d, n * sizeof(unsigned)));
  CK(cudaMemcpy(d, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  int count = n;
  void* args[] = {&d, &count};
  if (launch(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr) != CUDA_SUCCESS) return false;
  CK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  for (int i = 0; i < n; ++i)
    if (h[i] != base + i + 1) return false;
  return true;
}

// The module's gpool_test_increment, run as above.
static bool runIncrement(CUmodule m, unsigned base) {
  auto getFunction = driverEntryPoint<CUresult (*)(CUfunction*, CUmodule, const char*)>("cuModuleGetFunction");
  CUfunction f = nullptr;
  return getFunction(&f, m, "gpool_test_increment") == CUDA_SUCCESS && runIncrement(f, base);
}
