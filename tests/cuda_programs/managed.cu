// Managed memory through gpool: the device reports no concurrent managed access, so the host touches
// managed memory only between synchronisations; what a kernel wrote is the host's after the next
// synchronisation, and what the host wrote is the kernel's at the next launch; __managed__ variables too.
// Values are checked.
#include <cuda_runtime.h>

#include <vector>

#include "checks.h"
#include "increment.cuh"

// A __managed__ variable: the runtime asks the driver for it (cuLibraryGetManaged) when it registers this
// program, and the host then reads and writes it by its address, as it does managed allocations.
__managed__ unsigned g_counters[4] = {5, 6, 7, 8};

void managedVariable() {
  check(g_counters[0] == 5 && g_counters[3] == 8, "a __managed__ variable starts with its initial value on the host");
  g_counters[1] = 40;
  gpool_test_increment<<<1, 4>>>(g_counters, 4);
  CK(cudaDeviceSynchronize());
  check(g_counters[0] == 6 && g_counters[1] == 41 && g_counters[3] == 9,
        "a kernel sees what the host wrote, and the host what the kernel wrote after the synchronisation");
  cudaPointerAttributes a{};
  CK(cudaPointerGetAttributes(&a, g_counters));
  check(a.type == cudaMemoryTypeManaged, "its address is managed memory");
}

int main() {
  CK(cudaSetDevice(0));
  managedVariable();
  int managed = 0, concurrent = 1;
  CK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
  CK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
  check(managed == 1, "the device supports managed memory");
  // gpool reports 0 (the host must synchronise before touching it); an H100 natively reports 1. The
  // program follows the stricter rules, which hold on both.
  std::printf("INFO  concurrentManagedAccess = %d\n", concurrent);

  const int n = 4096;
  unsigned* m = nullptr;
  CK(cudaMallocManaged(&m, n * sizeof(unsigned)));
  for (int i = 0; i < n; ++i) m[i] = 10 * i;  // the host writes
  gpool_test_increment<<<n / 256, 256>>>(m, n);
  CK(cudaDeviceSynchronize());
  bool ok = true;
  for (int i = 0; i < n; ++i) ok &= m[i] == 10u * i + 1;
  check(ok, "the host's values reach the kernel, and the kernel's come back after cudaDeviceSynchronize");

  m[7] = 1000;  // the host writes again; two launches in one epoch, then a stream synchronisation
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  gpool_test_increment<<<n / 256, 256, 0, s>>>(m, n);
  gpool_test_increment<<<n / 256, 256, 0, s>>>(m, n);
  CK(cudaStreamSynchronize(s));
  check(m[7] == 1002 && m[8] == 83, "two launches, then cudaStreamSynchronize");

  // Copies and memsets of managed memory, and pointer queries.
  unsigned* d = nullptr;
  CK(cudaMalloc(&d, n * sizeof(unsigned)));
  CK(cudaMemset(d, 0, n * sizeof(unsigned)));
  CK(cudaMemcpy(m, d, 16 * sizeof(unsigned), cudaMemcpyDefault));
  check(m[0] == 0 && m[15] == 0 && m[16] == 163, "a cudaMemcpy into managed memory is seen by the host when it returns");
  m[100] = 5;
  CK(cudaMemcpy(d, m, n * sizeof(unsigned), cudaMemcpyDefault));
  std::vector<unsigned> back(n);
  CK(cudaMemcpy(back.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  check(back[100] == 5 && back[200] == 2003, "a cudaMemcpy from managed memory carries the host's writes");
  cudaPointerAttributes a{};
  CK(cudaPointerGetAttributes(&a, m + 10));
  check(a.type == cudaMemoryTypeManaged && a.hostPointer == m + 10 && a.devicePointer == m + 10,
        "cudaPointerGetAttributes reports managed memory, one address for host and device");

  cudaMemLocation gpu{cudaMemLocationTypeDevice, 0}, cpu{cudaMemLocationTypeHost, 0};
  CK(cudaMemPrefetchAsync(m, n * sizeof(unsigned), gpu, 0, s));
  gpool_test_increment<<<n / 256, 256, 0, s>>>(m, n);
  CK(cudaMemPrefetchAsync(m, n * sizeof(unsigned), cpu, 0, s));
  CK(cudaStreamSynchronize(s));
  check(m[100] == 6, "prefetching to the device and back around a launch");
  CK(cudaMemAdvise(m, n * sizeof(unsigned), cudaMemAdviseSetReadMostly, gpu));
  int read_mostly = -1, last_prefetch = 0;
  void* data[] = {&read_mostly, &last_prefetch};
  size_t sizes[] = {sizeof read_mostly, sizeof last_prefetch};
  cudaMemRangeAttribute attrs[] = {cudaMemRangeAttributeReadMostly, cudaMemRangeAttributeLastPrefetchLocation};
  CK(cudaMemRangeGetAttributes(data, sizes, attrs, 2, m, n * sizeof(unsigned)));
  check(read_mostly == 0 && last_prefetch == cudaInvalidDeviceId, "cudaMemRangeGetAttributes answers each attribute");
  // As CUDA does on a device without concurrent managed access (what gpool reports): batches are refused;
  // with it (an H200 natively), they are made.
  void* ptrs[] = {m};
  size_t bytes[] = {n * sizeof(unsigned)};
  size_t first[] = {0};
  cudaError_t batch = cudaMemPrefetchBatchAsync(ptrs, bytes, 1, &gpu, first, 1, 0, s);
  check(concurrent ? batch == cudaSuccess : batch != cudaSuccess, "a batched prefetch as the device's concurrent managed access allows");
  cudaGetLastError();
  CK(cudaFree(m));
  check(cudaFree(m) != cudaSuccess, "managed memory is freed once");
  cudaGetLastError();
  CK(cudaFree(d));
  CK(cudaStreamDestroy(s));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
