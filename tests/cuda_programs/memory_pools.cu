// Stream-ordered allocation and memory pools through gpool, checked by value (no kernels).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "checks.h"

int main() {
  CK(cudaSetDevice(0));
  int supported = 0;
  CK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
  check(supported == 1, "the device supports memory pools");
  cudaStream_t s;
  CK(cudaStreamCreate(&s));

  // cudaMallocAsync from the device's current pool, used and freed in stream order.
  const size_t n = 3u << 20;
  void* p = nullptr;
  CK(cudaMallocAsync(&p, n, s));
  CK(cudaMemsetAsync(p, 0x5a, n, s));
  std::vector<uint8_t> back(n, 0);
  CK(cudaMemcpyAsync(back.data(), p, n, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  bool ok = true;
  for (uint8_t b : back) ok &= b == 0x5a;
  check(ok, "cudaMallocAsync memory holds what cudaMemsetAsync wrote");
  CK(cudaFreeAsync(p, s));
  CK(cudaStreamSynchronize(s));
  check(cudaFreeAsync(p, s) != cudaSuccess, "a second cudaFreeAsync of the same pointer is refused");
  cudaGetLastError();

  // An explicit pool on device 0.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  CK(cudaMemPoolCreate(&pool, &props));
  void* q = nullptr;
  CK(cudaMallocFromPoolAsync(&q, n, pool, s));
  std::vector<uint32_t> words(n / 4), got(n / 4);
  for (size_t i = 0; i < words.size(); ++i) words[i] = static_cast<uint32_t>(i * 2654435761u);
  CK(cudaMemcpyAsync(q, words.data(), n, cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(got.data(), q, n, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  check(got == words, "cudaMallocFromPoolAsync memory round-trips its data");
  uint64_t used = 0;
  CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  check(used >= n, "the pool reports the bytes in use");
  uint64_t threshold = UINT64_MAX, read = 0;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &read));
  size_t free_bytes = 0, total = 0;
  CK(cudaMemGetInfo(&free_bytes, &total));
  if (throughGpool())  // gpool's rule: a lease's pool keeps no more than the lease (the driver keeps what it is told)
    check(read > 0 && read <= total, "a pool's release threshold is kept within the lease's memory");
  int reuse = 0;
  CK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
  int off = 0;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &off));
  CK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
  check(reuse == 0, "an int-valued pool attribute is set and read back");
  CK(cudaFreeAsync(q, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemPoolTrimTo(pool, 0));

  // The device's current pool can be switched and restored; the default pool cannot be destroyed.
  cudaMemPool_t def, cur;
  CK(cudaDeviceGetDefaultMemPool(&def, 0));
  CK(cudaDeviceSetMemPool(0, pool));
  CK(cudaDeviceGetMemPool(&cur, 0));
  check(cur == pool, "cudaDeviceSetMemPool makes the pool current");
  CK(cudaDeviceSetMemPool(0, def));
  CK(cudaDeviceGetMemPool(&cur, 0));
  check(cur == def, "the default pool is current again");
  check(cudaMemPoolDestroy(def) != cudaSuccess, "the default pool is not destroyed");
  cudaGetLastError();
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = 0;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  CK(cudaMemPoolSetAccess(pool, &access, 1));
  cudaMemAccessFlags flags;
  CK(cudaMemPoolGetAccess(&flags, pool, &access.location));
  check(flags == cudaMemAccessFlagsProtReadWrite, "the pool is accessible from its device");
  CK(cudaMemPoolDestroy(pool));

  // Inside a capture, cudaFreeAsync makes a free node, which frees graph allocations only (as CUDA says):
  // memory from a pool is refused, and stays the program's to free (graph_memory.cu has the rest).
  void* outside = nullptr;
  CK(cudaMallocAsync(&outside, 1 << 20, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaError_t e = cudaFreeAsync(outside, s);
  check(e == cudaErrorInvalidValue, "cudaFreeAsync inside a capture refuses memory no graph allocated", cudaGetErrorName(e));
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(s, &g);
  if (g) CK(cudaGraphDestroy(g));
  cudaGetLastError();
  check(cudaFreeAsync(outside, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess,
        "after the capture the memory is still the program's, and frees");
  CK(cudaStreamDestroy(s));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
