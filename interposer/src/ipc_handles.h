// The 64-byte handles a program holds for memory shared between processes (CUipcMemHandle,
// CUipcEventHandle, CUmemPoolPtrExportData): gpool's own handles (server/worker/ipc_registry.h), copied in
// and out of their `reserved` bytes. api_ipc.cpp and api_shareable_handle.cpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "state.h"  // cuda.h as the library includes it, and the log

namespace gpool::client {

// A worker refuses a handle made on another GPU host with CUDA_ERROR_NOT_SUPPORTED: said once per call,
// naming the fix. Returns `r`.
inline CUresult explainForeignHandle(CUresult r, const char* call) {
  if (r == CUDA_ERROR_NOT_SUPPORTED)
    GPOOL_LOG(Level::kError, "%s: the handle was made by a process whose GPU is on another host; sharing memory between "
              "processes needs both processes' leases on one GPU host (returning CUDA_ERROR_NOT_SUPPORTED)", call);
  return r;
}

template <typename Handle>
CUresult handleOut(Handle* out, const std::vector<uint8_t>& bytes) {
  if (bytes.size() != sizeof out->reserved) return CUDA_ERROR_UNKNOWN;
  std::memcpy(out->reserved, bytes.data(), bytes.size());
  return CUDA_SUCCESS;
}

template <typename Handle>
std::vector<uint8_t> handleIn(const Handle& h) {
  const auto* p = reinterpret_cast<const uint8_t*>(h.reserved);
  return std::vector<uint8_t>(p, p + sizeof h.reserved);
}

}  // namespace gpool::client
