// CUDA_LAUNCH_BLOCKING=1, which PyTorch's error messages advise for finding the kernel that failed: each
// launch returns once the kernel has run, so a failure is reported by the launch that caused it. Through
// gpool the worker's driver never sees the program's environment; the client waits instead. A launch
// captured into a graph only records it, and the capture goes on. Run with CUDA_LAUNCH_BLOCKING=1 (CI:
// cuda_program.launch_blocking).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "checks.h"
#include "increment.cuh"

namespace {

constexpr int kWords = 1024;

void CUDART_CB slow(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }

}  // namespace

int main() {
  const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING");
  check(blocking && std::strcmp(blocking, "1") == 0, "run with CUDA_LAUNCH_BLOCKING=1");
  unsigned* d = nullptr;
  CK(cudaMalloc(&d, kWords * sizeof(unsigned)));
  CK(cudaMemset(d, 0, kWords * sizeof(unsigned)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Work ahead of the kernel takes 300 ms: a launch that did not wait would return long before it ran.
  // (A lower bound only: a slow machine makes the launch slower, never faster than the work it waits for.)
  // The kernel is loaded first, by a launch of no words, so that the timed launch is a launch only.
  gpool_test_increment<<<1, 1, 0, s>>>(d, 0);
  CK(cudaStreamSynchronize(s));
  CK(cudaLaunchHostFunc(s, slow, nullptr));
  auto t0 = std::chrono::steady_clock::now();
  gpool_test_increment<<<kWords / 256, 256, 0, s>>>(d, kWords);
  CK(cudaGetLastError());
  auto waited = std::chrono::steady_clock::now() - t0;
  check(waited >= std::chrono::milliseconds(250), "the launch returned once the work before it had run");
  check(cudaStreamQuery(s) == cudaSuccess, "and the kernel too");

  // Captured: the launch is recorded, not run, and the capture is not broken by a wait.
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  gpool_test_increment<<<kWords / 256, 256, 0, s>>>(d, kWords);
  CK(cudaGetLastError());
  CK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));

  std::vector<unsigned> h(kWords);
  CK(cudaMemcpy(h.data(), d, kWords * sizeof(unsigned), cudaMemcpyDeviceToHost));
  bool all_two = true;
  for (unsigned v : h) all_two = all_two && v == 2;
  check(all_two, "the launch ran once directly and once in the graph, not at capture");
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(s));
  CK(cudaFree(d));
  if (failures == 0) std::printf("ALL PASSED\n");
  return failures ? 1 : 0;
}
