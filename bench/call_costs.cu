// Per-call costs through whatever libcuda.so.1 the loader finds (run it natively and through gpool in one
// run with bench/run.sh): asynchronous launches, launch + synchronise, occupancy questions (repeated and
// new), a 4-byte device-to-host copy (directly, and replayed by a graph that captured it), a 1 MiB
// cudaMalloc + cudaFree, a host function
// and its wait, and 256 MiB copies each way (pageable and pinned). Prints "name value unit" lines.
#include <cuda_runtime.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "bench_timing.h"

__global__ void empty_kernel() {}

// Asynchronous launches (then one synchronise), and launch + synchronise.
void launches(int launches, int n) {
  double t = bestSeconds(5, [&] {
    for (int i = 0; i < launches; ++i) empty_kernel<<<1, 1>>>();
    CK(cudaDeviceSynchronize());
  });
  std::printf("async_launch %.3f us\n", t / launches * 1e6);
  t = bestSeconds(5, [&] {
    for (int i = 0; i < n; ++i) {
      empty_kernel<<<1, 1>>>();
      CK(cudaStreamSynchronize(0));
    }
  });
  std::printf("launch_sync %.3f us\n", t / n * 1e6);
}

// Occupancy questions: the same one again and again, as CUB asks at every sort and scan, and 1,024 that
// are each asked for the first time (dynamic shared memory 0, 1, 2... bytes), which gpool must forward.
void occupancy(int n) {
  int blocks = 0;
  double t = bestSeconds(5, [&] {
    for (int i = 0; i < n; ++i) CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, empty_kernel, 256, 0));
  });
  std::printf("occupancy_repeat %.3f us\n", t / n * 1e6);
  size_t fresh = 1;
  t = bestSeconds(5, [&] {
    for (int i = 0; i < 1024; ++i) CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, empty_kernel, 256, fresh++));
  });
  std::printf("occupancy_new %.3f us\n", t / 1024 * 1e6);
}

// A 4-byte device-to-host copy; cudaMalloc and cudaFree of 1 MiB: each returns once the device's memory
// changed (natively, cudaFree waits for the device; through gpool, for the worker), so each costs a round
// trip there.
void smallCopiesAndAllocations(int n, int* d4, int& h4) {
  double t = bestSeconds(5, [&] {
    for (int i = 0; i < n; ++i) CK(cudaMemcpy(&h4, d4, 4, cudaMemcpyDeviceToHost));
  });
  std::printf("dtoh_4B %.3f us\n", t / n * 1e6);
  t = bestSeconds(5, [&] {
    for (int i = 0; i < n / 10; ++i) {
      void* m = nullptr;
      CK(cudaMalloc(&m, size_t{1} << 20));
      CK(cudaFree(m));
    }
  });
  std::printf("malloc_free_1MiB %.3f us\n", t / (n / 10) * 1e6);
}

// The same 4 bytes copied by a graph: a captured device-to-host copy into pageable memory, replayed and
// waited for (jacobiCudaGraphs's pattern). Through gpool over TCP, each replay asks the client to take
// the bytes on its host-function channel. Then a host function and a wait for it (cudaLaunchHostFunc;
// XLA's host callbacks): through gpool the worker asks the client to run it on the host-function channel,
// and the stream waits for the answer.
void hostCallbacks(int n, int* d4, int& h4) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemcpyAsync(&h4, d4, 4, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  double t = bestSeconds(5, [&] {
    for (int i = 0; i < n; ++i) {
      CK(cudaGraphLaunch(exec, s));
      CK(cudaStreamSynchronize(s));
    }
  });
  std::printf("graph_dtoh_4B %.3f us\n", t / n * 1e6);
  static int calls = 0;
  t = bestSeconds(5, [&] {
    for (int i = 0; i < n; ++i) {
      CK(cudaLaunchHostFunc(s, [](void*) { ++calls; }, nullptr));
      CK(cudaStreamSynchronize(s));
    }
  });
  if (calls != 5 * n) std::fprintf(stderr, "host functions ran %d times, not %d\n", calls, 5 * n);
  std::printf("host_func %.3f us\n", t / n * 1e6);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(s));
}

// 256 MiB copies each way, from pageable and from pinned memory (best of 3).
void bigCopies() {
  const size_t big = size_t{256} << 20;
  void* d = nullptr;
  CK(cudaMalloc(&d, big));
  std::vector<char> pageable(big, 1);
  char* pinned = nullptr;
  CK(cudaMallocHost(&pinned, big));
  std::fill(pinned, pinned + big, 2);
  double gb = big / 1e9;
  std::printf("htod_256MiB_pageable %.2f GB/s\n", gb / bestSeconds(3, [&] { CK(cudaMemcpy(d, pageable.data(), big, cudaMemcpyHostToDevice)); }));
  std::printf("dtoh_256MiB_pageable %.2f GB/s\n", gb / bestSeconds(3, [&] { CK(cudaMemcpy(pageable.data(), d, big, cudaMemcpyDeviceToHost)); }));
  std::printf("htod_256MiB_pinned %.2f GB/s\n", gb / bestSeconds(3, [&] { CK(cudaMemcpy(d, pinned, big, cudaMemcpyHostToDevice)); }));
  std::printf("dtoh_256MiB_pinned %.2f GB/s\n", gb / bestSeconds(3, [&] { CK(cudaMemcpy(pinned, d, big, cudaMemcpyDeviceToHost)); }));
  CK(cudaFreeHost(pinned));
  CK(cudaFree(d));
}

int main(int argc, char** argv) {
  int count = argc > 1 ? std::atoi(argv[1]) : 20000;
  CK(cudaFree(nullptr));
  empty_kernel<<<1, 1>>>();
  CK(cudaDeviceSynchronize());
  int n = count / 10;
  launches(count, n);
  occupancy(n);
  int* d4 = nullptr;
  CK(cudaMalloc(&d4, 4));
  int h4 = 0;
  smallCopiesAndAllocations(n, d4, h4);
  hostCallbacks(n, d4, h4);
  bigCopies();
  CK(cudaFree(d4));
  return 0;
}
