// The kernel most test programs launch: adds 1 to each of `n` words. On the sim backend,
// tests/cuda_programs/sim_kernels.cpp runs it by its name.
#pragma once

extern "C" __global__ void gpool_test_increment(unsigned* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}
