// The cuda backend's virtual memory management: address ranges, physical memory, mappings, access.
#include "cuda_backend_class.h"

namespace gpool::worker {

// Virtual memory management: physical memory on the worker's device, whatever the client numbered it.
CUmemAllocationProp CudaBackend::deviceProp(uint32_t handle_types, uint32_t compression, uint32_t usage) const {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, dev_};
  prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(handle_types);
  prop.allocFlags.compressionType = static_cast<unsigned char>(compression);
  prop.allocFlags.usage = static_cast<unsigned short>(usage);
  return prop;
}

Status CudaBackend::MemGetGranularity(uint32_t option, uint64_t& bytes) {
  CUmemAllocationProp prop = deviceProp();
  size_t g = 0;
  CUresult r = d_.cuMemGetAllocationGranularity_(&g, &prop, static_cast<CUmemAllocationGranularity_flags>(option));
  bytes = g;
  return r;
}

Status CudaBackend::MemAddressReserve(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t flags, Created<VaRange>& out) {
  CUdeviceptr p = 0;
  CUresult r = d_.cuMemAddressReserve_(&p, size, alignment, hint, flags);
  out.ptr = p;
  out.size = size;
  return r;
}

Status CudaBackend::MemCreate(AllocBytes bytes, uint32_t handle_types, uint32_t compression, uint32_t usage, Created<Physical>& out) {
  CUmemAllocationProp prop = deviceProp(handle_types, compression, usage);
  CUmemGenericAllocationHandle h = 0;
  CUresult r = d_.cuMemCreate_(&h, bytes, &prop, 0);
  out = h;
  return r;
}

Status CudaBackend::MemRelease(Released<Physical> h) {
  // (Its export, if any, was ended by the worker, which also lets go of it once imported and unmapped: import_holds.h.)
  return d_.cuMemRelease_(h.v);
}

Status CudaBackend::MemSetAccess(VaMapped m, uint32_t flags) {
  CUmemAccessDesc desc{CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, dev_}, static_cast<CUmemAccess_flags>(flags)};
  return d_.cuMemSetAccess_(m.ptr, m.size, &desc, 1);
}
}  // namespace gpool::worker
