// What the client library remembers of graph allocations (CI, sim only: native CUDA may keep a freed
// pool's addresses reserved, so pointer queries there are the driver's business). An allocation made while
// a capture runs may be the graph's: the client keeps its address while the worker says a graph holds it,
// and forgets it once the graph is gone or the memory was an ordinary allocation beside the capture, freed.
#include <cuda_runtime.h>

#include "checks.h"

namespace {

bool isDevice(void* p) {
  cudaPointerAttributes a{};
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  cudaGetLastError();
  return e == cudaSuccess && a.type == cudaMemoryTypeDevice;
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  cudaStream_t s, beside;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&beside, cudaStreamNonBlocking));
  cudaGraph_t g;
  void *a = nullptr, *b = nullptr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(cudaMallocAsync(&a, 1 << 20, s));
  CK(cudaMallocAsync(&b, 1 << 20, beside));  // not captured: an ordinary allocation
  CK(cudaFreeAsync(a, s));
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e;
  CK(cudaGraphInstantiate(&e, g, 0));
  CK(cudaGraphLaunch(e, s));
  CK(cudaStreamSynchronize(s));
  check(isDevice(a), "a graph allocation's address is device memory while its graph lives");
  check(isDevice(b), "so is the allocation made beside the capture");
  CK(cudaFreeAsync(b, beside));
  CK(cudaStreamSynchronize(beside));
  check(!isDevice(b), "the allocation beside the capture is forgotten once freed");
  check(isDevice(a), "the graph's is not");
  CK(cudaGraphExecDestroy(e));
  check(isDevice(a), "the graph still holds it");
  CK(cudaGraphDestroy(g));
  check(!isDevice(a), "forgotten once no graph holds it");
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(beside));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
