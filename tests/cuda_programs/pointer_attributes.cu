// Pointer attributes for every kind of memory a client has, as the CUDA runtime and PyTorch query them
// (cudaPointerGetAttributes, which is_pinned() and pin_memory() use, and the driver's own queries).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "checks.h"

namespace {

void expect(const void* p, cudaMemoryType type, bool device_ptr, bool host_ptr, const char* what) {
  cudaPointerAttributes a{};
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  char line[160];
  std::snprintf(line, sizeof line, "%s: type %d device %d devicePointer %p hostPointer %p", what, static_cast<int>(a.type),
                a.device, a.devicePointer, a.hostPointer);
  bool ok = e == cudaSuccess && a.type == type && (device_ptr ? a.devicePointer == p : a.devicePointer == nullptr) &&
            (host_ptr ? a.hostPointer == p : a.hostPointer == nullptr) && (type == cudaMemoryTypeUnregistered || a.device == 0);
  check(ok, line);
  if (e != cudaSuccess) cudaGetLastError();
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  void *dev = nullptr, *pinned = nullptr, *mapped = nullptr, *pitched = nullptr, *pooled = nullptr;
  size_t pitch = 0;
  CK(cudaMalloc(&dev, 4096));
  CK(cudaMallocHost(&pinned, 4096));
  CK(cudaHostAlloc(&mapped, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaMallocPitch(&pitched, &pitch, 100, 10));
  CK(cudaMallocAsync(&pooled, 4096, 0));
  CK(cudaStreamSynchronize(0));
  std::vector<char> pageable(1 << 16);
  void* registered = std::aligned_alloc(4096, 1 << 16);

  expect(dev, cudaMemoryTypeDevice, true, false, "cudaMalloc memory");
  expect(static_cast<char*>(dev) + 100, cudaMemoryTypeDevice, true, false, "an interior device pointer");
  expect(pitched, cudaMemoryTypeDevice, true, false, "cudaMallocPitch memory");
  expect(pooled, cudaMemoryTypeDevice, true, false, "cudaMallocAsync memory");
  expect(pinned, cudaMemoryTypeHost, true, true, "cudaMallocHost memory (page-locked)");
  expect(mapped, cudaMemoryTypeHost, true, true, "cudaHostAlloc mapped memory");
  // Unregistered memory: the host's address is the pointer itself, as NVIDIA's runtime reports it.
  expect(pageable.data(), cudaMemoryTypeUnregistered, false, true, "pageable memory");
  CK(cudaHostRegister(registered, 1 << 16, cudaHostRegisterDefault));
  expect(static_cast<char*>(registered) + 8, cudaMemoryTypeHost, true, true, "cudaHostRegister memory");
  CK(cudaHostUnregister(registered));
  expect(registered, cudaMemoryTypeUnregistered, false, true, "memory after cudaHostUnregister");

  // The driver's queries: one attribute, and several at once (as PyTorch asks them).
  auto cuPointerGetAttribute = driverEntryPoint<CUresult (*)(void*, CUpointer_attribute, CUdeviceptr)>("cuPointerGetAttribute");
  auto cuPointerGetAttributes =
      driverEntryPoint<CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr)>("cuPointerGetAttributes");
  CUmemorytype type = CU_MEMORYTYPE_ARRAY;
  check(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(pinned)) == CUDA_SUCCESS &&
            type == CU_MEMORYTYPE_HOST,
        "cuPointerGetAttribute MEMORY_TYPE of page-locked memory");
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS,
                                 CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
  unsigned mt = 0;
  int ordinal = -1, managed = -1, rdma = -1;
  CUdeviceptr start = 0;
  size_t size = 0, mapping = 0;
  CUmemoryPool mempool = nullptr;
  unsigned long long flags = 99;
  void* data[] = {&mt, &ordinal, &managed, &start, &size, &mempool, &flags, &rdma, &mapping};
  CUresult r = cuPointerGetAttributes(9, attrs, data, reinterpret_cast<CUdeviceptr>(dev) + 16);
  check(r == CUDA_SUCCESS && mt == CU_MEMORYTYPE_DEVICE && ordinal == 0 && managed == 0 &&
            start == reinterpret_cast<CUdeviceptr>(dev) && size == 4096 && flags == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE,
        "cuPointerGetAttributes of device memory, nine attributes at once");
  r = cuPointerGetAttributes(9, attrs, data, reinterpret_cast<CUdeviceptr>(pooled));
  check(r == CUDA_SUCCESS && mempool != nullptr, "a pool allocation names its pool");

  CK(cudaFree(dev));
  CK(cudaFreeHost(pinned));
  CK(cudaFreeHost(mapped));
  CK(cudaFree(pitched));
  CK(cudaFreeAsync(pooled, 0));
  std::free(registered);
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
