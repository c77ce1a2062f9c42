// Virtual memory management through gpool, as PyTorch's expandable segments and NCCL use it: reserve an
// address range, create physical memory, map it (twice, aliased), set access, copy across two mappings,
// retain and release handles, unmap and free. Checked by value.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "checks.h"

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));  // make the runtime's context current for the driver calls
  auto granularityOf = driverEntryPoint<CUresult (*)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags)>(
      "cuMemGetAllocationGranularity");
  auto reserve = driverEntryPoint<CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long)>("cuMemAddressReserve");
  auto addressFree = driverEntryPoint<CUresult (*)(CUdeviceptr, size_t)>("cuMemAddressFree");
  auto create = driverEntryPoint<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long)>("cuMemCreate");
  auto release = driverEntryPoint<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease");
  auto map = driverEntryPoint<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)>("cuMemMap");
  auto unmap = driverEntryPoint<CUresult (*)(CUdeviceptr, size_t)>("cuMemUnmap");
  auto setAccess = driverEntryPoint<CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t)>("cuMemSetAccess");
  auto getAccess = driverEntryPoint<CUresult (*)(unsigned long long*, const CUmemLocation*, CUdeviceptr)>("cuMemGetAccess");
  auto retain = driverEntryPoint<CUresult (*)(CUmemGenericAllocationHandle*, void*)>("cuMemRetainAllocationHandle");
  auto propsOf = driverEntryPoint<CUresult (*)(CUmemAllocationProp*, CUmemGenericAllocationHandle)>("cuMemGetAllocationPropertiesFromHandle");

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t g = 0;
  check(granularityOf(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && g > 0, "cuMemGetAllocationGranularity");

  CUdeviceptr va = 0, va2 = 0;
  check(reserve(&va, 4 * g, 0, 0, 0) == CUDA_SUCCESS && va != 0, "cuMemAddressReserve of four granules");
  check(reserve(&va2, 2 * g, 0, 0, 0) == CUDA_SUCCESS && va2 != 0, "a second reservation");
  CUmemGenericAllocationHandle a = 0, b = 0;
  check(create(&a, 2 * g, &prop, 0) == CUDA_SUCCESS, "cuMemCreate of two granules");
  check(create(&b, g, &prop, 0) == CUDA_SUCCESS, "cuMemCreate of one granule");
  check(map(va, 2 * g, 0, a, 0) == CUDA_SUCCESS && map(va + 2 * g, g, 0, b, 0) == CUDA_SUCCESS, "cuMemMap of both, side by side");
  check(map(va + g, g, 0, b, 0) != CUDA_SUCCESS, "mapping over a mapped range is refused");
  CUmemAccessDesc rw{};
  rw.location = prop.location;
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(setAccess(va, 3 * g, &rw, 1) == CUDA_SUCCESS, "cuMemSetAccess across both mappings");
  unsigned long long flags = 0;
  check(getAccess(&flags, &prop.location, va + 2 * g + 5) == CUDA_SUCCESS && flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        "cuMemGetAccess reads the flags back");

  // One copy across the boundary of the two mappings, and back.
  const size_t n = 3 * g;
  std::vector<uint32_t> h(n / 4), back(n / 4, 0);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint32_t>(i * 2246822519u + 7);
  CK(cudaMemcpy(reinterpret_cast<void*>(va), h.data(), n, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(back.data(), reinterpret_cast<void*>(va), n, cudaMemcpyDeviceToHost));
  check(back == h, "cudaMemcpy across two mappings round-trips");
  cudaPointerAttributes attr{};
  CK(cudaPointerGetAttributes(&attr, reinterpret_cast<void*>(va + g)));
  check(attr.type == cudaMemoryTypeDevice && attr.device == 0, "mapped memory is device memory to cudaPointerGetAttributes");

  // The same physical memory at a second address shows the same bytes.
  check(map(va2, 2 * g, 0, a, 0) == CUDA_SUCCESS && setAccess(va2, 2 * g, &rw, 1) == CUDA_SUCCESS, "a second mapping of the first allocation");
  uint32_t word = 0;
  CK(cudaMemcpy(&word, reinterpret_cast<void*>(va2 + 4 * 1000), 4, cudaMemcpyDeviceToHost));
  check(word == h[1000], "an aliased mapping shows the same memory");
  CK(cudaMemset(reinterpret_cast<void*>(va2), 0xab, 16));
  CK(cudaMemcpy(&word, reinterpret_cast<void*>(va), 4, cudaMemcpyDeviceToHost));
  check(word == 0xababababu, "a write through one mapping is seen through the other");

  CUmemGenericAllocationHandle r = 0;
  check(retain(&r, reinterpret_cast<void*>(va + g + 3)) == CUDA_SUCCESS && r == a, "cuMemRetainAllocationHandle names the mapped allocation");
  check(release(r) == CUDA_SUCCESS, "the retained reference is released");
  CUmemAllocationProp got{};
  check(propsOf(&got, b) == CUDA_SUCCESS && got.location.id == 0 && got.type == CU_MEM_ALLOCATION_TYPE_PINNED,
        "cuMemGetAllocationPropertiesFromHandle");

  check(unmap(va + g, g) != CUDA_SUCCESS, "unmapping half a mapping is refused");
  check(addressFree(va, 4 * g) != CUDA_SUCCESS, "freeing a reservation that is still mapped is refused");
  check(release(a) == CUDA_SUCCESS && release(b) == CUDA_SUCCESS, "cuMemRelease while still mapped");
  CK(cudaMemcpy(back.data(), reinterpret_cast<void*>(va + 2 * g), g, cudaMemcpyDeviceToHost));
  check(std::memcmp(back.data(), h.data() + 2 * g / 4, g) == 0, "released memory stays readable until unmapped");
  check(unmap(va, 3 * g) == CUDA_SUCCESS && unmap(va2, 2 * g) == CUDA_SUCCESS, "cuMemUnmap of everything");
  check(cudaMemcpy(back.data(), reinterpret_cast<void*>(va), 4, cudaMemcpyDeviceToHost) != cudaSuccess,
        "an unmapped range is no longer device memory");
  cudaGetLastError();
  check(addressFree(va, 4 * g) == CUDA_SUCCESS && addressFree(va2, 2 * g) == CUDA_SUCCESS, "cuMemAddressFree");
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
