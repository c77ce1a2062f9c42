// Launches beyond the plain one, as libraries make them on Hopper: cooperative (a grid-wide barrier),
// thread-block clusters (a kernel's own __cluster_dims__, and a launch attribute), programmatic dependent
// launch (cuBLAS's and CUTLASS's kernels overlap so on sm_90), a launch priority, and a kernel that
// launches a kernel itself (dynamic parallelism, linked with cudadevrt). Every launch's status is checked;
// on sim kernels are recorded, not computed, so values are compared only when GPOOL_TEST_EXPECT_COMPUTE=1
// (natively, or through gpool on a GPU). Prints one line per check; exits 1 on failure.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "checks.h"

namespace cg = cooperative_groups;

namespace {

// Each block writes its number plus one; after the grid-wide barrier the first thread sums them all.
__global__ void gridSum(unsigned* partial, unsigned* total) {
  cg::grid_group grid = cg::this_grid();
  if (threadIdx.x == 0) partial[blockIdx.x] = blockIdx.x + 1;
  grid.sync();
  if (grid.thread_rank() == 0) {
    unsigned sum = 0;
    for (unsigned i = 0; i < gridDim.x; ++i) sum += partial[i];
    *total = sum;
  }
}

// Each block writes its rank within its cluster.
__global__ void __cluster_dims__(2, 1, 1) clusterOfTwo(unsigned* rank) {
  if (threadIdx.x == 0) rank[blockIdx.x] = cg::this_cluster().block_rank();
}
__global__ void clusterAsLaunched(unsigned* rank) {
  if (threadIdx.x == 0) rank[blockIdx.x] = cg::this_cluster().block_rank();
}

// A producer that lets its dependent start early, and a consumer that waits for the producer's writes.
__global__ void produce(unsigned* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i;
  cudaTriggerProgrammaticLaunchCompletion();
}
__global__ void consume(unsigned* p, int n) {
  cudaGridDependencySynchronize();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

// Dynamic parallelism: one thread of the parent launches the child over every element.
__global__ void child(unsigned* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= 3;
}
__global__ void parent(unsigned* p, int n) {
  if (blockIdx.x == 0 && threadIdx.x == 0) child<<<(n + 127) / 128, 128>>>(p, n);
}

std::vector<unsigned> fetch(const unsigned* d, size_t n) {
  std::vector<unsigned> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  return h;
}

void cooperative(unsigned* buffer) {
  int supported = 0, fit = 0, sms = 0;
  CK(cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, 0));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, gridSum, 128, 0));
  CHECK(supported == 1 && fit >= 1, "cooperative launch supported, %d blocks of 128 fit per SM", fit);
  const unsigned blocks = 16;
  unsigned* total = buffer + blocks;
  void* args[] = {&buffer, &total};
  CK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(gridSum), dim3(blocks), dim3(128), args, 0, nullptr));
  CK(cudaDeviceSynchronize());
  check(true, "cudaLaunchCooperativeKernel of 16 blocks with a grid-wide barrier");
  checkComputed(fetch(total, 1)[0] == blocks * (blocks + 1) / 2, "every block's write was seen after grid.sync()");
}

void clusters(unsigned* rank) {
  clusterOfTwo<<<8, 32>>>(rank);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<unsigned> got = fetch(rank, 8);
  bool ok = true;
  for (unsigned i = 0; i < 8; ++i) ok = ok && got[i] == i % 2;
  check(true, "a kernel with __cluster_dims__(2, 1, 1) launched");
  checkComputed(ok, "its blocks are ranked 0, 1 within each cluster of two");

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(8);
  config.blockDim = dim3(32);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 4;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  int active = 0;
  CK(cudaOccupancyMaxActiveClusters(&active, clusterAsLaunched, &config));
  CHECK(active >= 1, "cudaOccupancyMaxActiveClusters for clusters of four: %d", active);
  CK(cudaLaunchKernelEx(&config, clusterAsLaunched, rank));
  CK(cudaDeviceSynchronize());
  got = fetch(rank, 8);
  ok = true;
  for (unsigned i = 0; i < 8; ++i) ok = ok && got[i] == i % 4;
  check(true, "cudaLaunchKernelEx with a cluster dimension of four");
  checkComputed(ok, "its blocks are ranked 0..3 within each cluster of four");
}

void dependentLaunch(unsigned* p) {
  const int n = 4096;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  produce<<<n / 128, 128, 0, s>>>(p, n);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(n / 128);
  config.blockDim = dim3(128);
  config.stream = s;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  int least = 0, greatest = 0;
  CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  attr[1].id = cudaLaunchAttributePriority;
  attr[1].val.priority = greatest;
  config.attrs = attr;
  config.numAttrs = 2;
  CK(cudaLaunchKernelEx(&config, consume, p, n));
  CK(cudaStreamSynchronize(s));
  check(true, "a programmatic dependent launch at the highest priority after its producer");
  std::vector<unsigned> got = fetch(p, n);
  bool ok = true;
  for (int i = 0; i < n; ++i) ok = ok && got[i] == static_cast<unsigned>(i) + 1;
  checkComputed(ok, "the dependent kernel saw every write of its producer");
  CK(cudaStreamDestroy(s));
}

void dynamicParallelism(unsigned* p) {
  const int n = 1000;
  std::vector<unsigned> h(n);
  for (int i = 0; i < n; ++i) h[i] = i;
  CK(cudaMemcpy(p, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  parent<<<1, 32>>>(p, n);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  check(true, "a kernel that launches a kernel (dynamic parallelism) ran to its end");
  std::vector<unsigned> got = fetch(p, n);
  bool ok = true;
  for (int i = 0; i < n; ++i) ok = ok && got[i] == 3u * i;
  checkComputed(ok, "the child kernel tripled every element");
}

}  // namespace

int main() {
  unsigned* buffer = nullptr;
  CK(cudaMalloc(&buffer, 4096 * sizeof(unsigned)));
  cooperative(buffer);
  clusters(buffer);
  dependentLaunch(buffer);
  dynamicParallelism(buffer);
  CK(cudaFree(buffer));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
