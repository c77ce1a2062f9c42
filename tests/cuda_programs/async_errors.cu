// An asynchronous failure reaches the program even when the first request that waits is one gpool sends
// for itself (CI, sim: the worker refuses a memset outside the client's memory when it runs it, and says
// so at the next wait). The first stream-ordered allocation asks the worker for the device's pool; a graph
// destroyed while the client holds graph-allocation records asks which it may forget. Either request
// must hand the failure to the call that made it, not drop it (a GPU refuses the memset at once).
#include <cuda.h>
#include <cuda_runtime.h>

#include "checks.h"

namespace {

using MemsetAsync = CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream);

// A memset of memory the program never allocated, queued on `s`.
bool badMemset(cudaStream_t s) {
  static auto memset = driverEntryPoint<MemsetAsync>("cuMemsetD8Async");
  return memset(0x1000, 0, 16, reinterpret_cast<CUstream>(s)) != CUDA_SUCCESS;
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  bool reported = badMemset(s);
  void* p = nullptr;
  reported |= cudaMallocAsync(&p, 1 << 20, s) != cudaSuccess;
  reported |= cudaStreamSynchronize(s) != cudaSuccess;
  check(reported, "a failed memset is reported though the first wait was gpool's own question for the pool");
  cudaGetLastError();
  if (p) CK(cudaFreeAsync(p, s));
  CK(cudaStreamSynchronize(s));

  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocAsync(&p, 1 << 20, s));
  CK(cudaFreeAsync(p, s));
  CK(cudaStreamEndCapture(s, &g));
  reported = badMemset(s);
  reported |= cudaGraphDestroy(g) != cudaSuccess;
  reported |= cudaStreamSynchronize(s) != cudaSuccess;
  check(reported, "a failed memset is reported though the first wait was gpool's own question about graph memory");
  cudaGetLastError();
  CK(cudaStreamDestroy(s));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
