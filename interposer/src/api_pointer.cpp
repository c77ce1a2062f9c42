// Pointer attributes (cuPointerGetAttribute/s), answered from what this client allocated, mapped or
// registered: device memory (plain, pitched, pool), page-locked and registered host memory, module
// globals. The CUDA runtime's cudaPointerGetAttributes and PyTorch's is_pinned() ask these.
#include <cstring>

#include "state.h"

using namespace gpool::client;

namespace {

template <typename T>
void put(void* data, T v) {
  std::memcpy(data, &v, sizeof v);
}

// One attribute of a pointer this client knows (`base`, `a`). `plural`: cuPointerGetAttributes, which
// answers NULL where the single query fails (a device pointer's host address).
CUresult attribute(void* data, CUpointer_attribute attr, CUdeviceptr p, uint64_t base, const Allocation& a, bool plural) {
  State& s = State::get();
  // Device memory is its worker's device's; host memory, the current one's.
  CUdevice device = a.device ? s.deviceOfConnection(a.owner) : s.currentDevice();
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: put(data, reinterpret_cast<CUcontext>(s.primary(device))); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: put<unsigned>(data, a.device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: put<CUdeviceptr>(data, p); break;  // unified addressing, host memory too
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: {
      bool host = !a.device || a.managed;  // managed memory is the host's too, at the same address
      if (!host && !plural) return CUDA_ERROR_INVALID_VALUE;
      put<void*>(data, host ? reinterpret_cast<void*>(p) : nullptr);
      break;
    }
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
      if (!plural) return CUDA_ERROR_NOT_SUPPORTED;  // nv-p2p tokens of a remote GPU mean nothing here
      std::memset(data, 0, sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS));
      break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: put<int>(data, a.sync_memops ? 1 : 0); break;
    case CU_POINTER_ATTRIBUTE_MAPPED: put<int>(data, 1); break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: put<unsigned long long>(data, base); break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: put<int>(data, a.managed ? 1 : 0); break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: put<int>(data, 0); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: put<int>(data, device); break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: put<CUdeviceptr>(data, base); break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: put<size_t>(data, a.size); break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: put<unsigned long long>(data, 0); break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: put<unsigned>(data, CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE); break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: put<CUmemoryPool>(data, reinterpret_cast<CUmemoryPool>(a.pool)); break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// What cuPointerGetAttributes reports for memory CUDA does not know: NULL and zero, an ordinal of -2, and
// the address itself as the host's (the runtime's hostPointer for unregistered memory, seen on an H200).
void unknown(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: put<int>(data, -2); break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: put<void*>(data, reinterpret_cast<void*>(p)); break;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: std::memset(data, 0, sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS)); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: put<unsigned>(data, 0); break;
    default: put<uint64_t>(data, 0); break;  // pointers, sizes, ids: 8 bytes
  }
}

}  // namespace

GPOOL_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  GPOOL_TRY
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  uint64_t base;
  Allocation a;
  if (!State::get().findAllocation(p, base, a)) return CUDA_ERROR_INVALID_VALUE;
  return attribute(data, attr, p, base, a, false);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data, CUdeviceptr p) {
  GPOOL_TRY
  if (!attrs || !data) return CUDA_ERROR_INVALID_VALUE;
  uint64_t base;
  Allocation a;
  bool known = State::get().findAllocation(p, base, a);
  for (unsigned i = 0; i < n; ++i) {
    if (!data[i]) continue;
    if (!known) unknown(data[i], attrs[i], p);
    else if (CUresult r = attribute(data[i], attrs[i], p, base, a, true)) return r;
  }
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// The one attribute a program may set: SYNC_MEMOPS, on device memory. The worker's driver gets it too;
// gpool's synchronous copies synchronize whatever it says.
GPOOL_EXPORT CUresult cuPointerSetAttribute(const void* value, CUpointer_attribute attr, CUdeviceptr p) {
  GPOOL_TRY
  if (!value || attr != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return CUDA_ERROR_INVALID_VALUE;
  int on = 0;
  std::memcpy(&on, value, sizeof on);
  if (on != 0 && on != 1) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_POINTER(conn, p);
  uint64_t base;
  Allocation a;
  if (!State::get().findAllocation(p, base, a) || !a.device || a.managed) return CUDA_ERROR_INVALID_VALUE;
  if (int st = conn->call<gpool::proto::calls::PointerSetSyncMemops>(uint64_t{p}, static_cast<uint32_t>(on))) return static_cast<CUresult>(st);
  State::get().setSyncMemops(p, on != 0);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
