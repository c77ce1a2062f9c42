// An asynchronous failure reaches the program even when the first request that waits is one gpool sends
// for itself (CI, sim: the worker refuses a memset outside the client's memory when it runs it, and says
// so at the next wait). The first stream-ordered allocation asks the worker for the device's pool; a graph
// destroyed while the client holds graph-allocation records asks which it may forget. Either request
// must hand the failure to the call that made it, not drop it (a GPU refuses the memset at once).
// Requests gpool sends aside, for its own bookkeeping, must leave the failure for the program's next wait:
// page-locked memory from the pool shared with the worker (over shared memory), and, with two devices
// (GPOOL_TEST_SHARES=2), the handles gpool exchanges to copy between them.
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

// A copy from device 0 to device 1 after a failure on device 0: gpool first asks device 0's worker for an
// IPC handle of the source (aside); the failure must still reach the program.
void twoDevices() {
  constexpr size_t kBytes = 1 << 20;
  void *src = nullptr, *dst = nullptr;
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&dst, kBytes));
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&src, kBytes));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  bool reported = badMemset(s);
  reported |= cudaMemcpyPeer(dst, 1, src, 0, kBytes) != cudaSuccess;
  reported |= cudaStreamSynchronize(s) != cudaSuccess;
  check(reported, "a failed memset on device 0 is reported though a copy to device 1 asked device 0's worker for a handle first");
  cudaGetLastError();
  CK(cudaMemcpyPeer(dst, 1, src, 0, kBytes));  // and the copy works afterwards
  CK(cudaStreamDestroy(s));
  CK(cudaFree(src));
  CK(cudaSetDevice(1));
  CK(cudaFree(dst));
  CK(cudaSetDevice(0));
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

  reported = badMemset(s);
  void* pinned = nullptr;
  reported |= cudaMallocHost(&pinned, 1 << 16) != cudaSuccess;
  reported |= cudaStreamSynchronize(s) != cudaSuccess;
  check(reported, "a failed memset is reported though page-locked memory was registered with the worker before the wait");
  cudaGetLastError();
  if (pinned) CK(cudaFreeHost(pinned));
  CK(cudaStreamDestroy(s));

  int devices = 0;
  CK(cudaGetDeviceCount(&devices));
  if (devices >= 2) twoDevices();
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
