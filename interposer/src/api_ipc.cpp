// IPC between processes (cuIpcGetMemHandle, cuIpcOpenMemHandle, event handles), as PyTorch's
// multiprocessing shares CUDA tensors: the handles are gpool's, made and opened by the workers, which
// works when both processes' workers are on one GPU host (server/worker/ipc_registry.h). Opened memory is
// device memory to this process until it is closed; it belongs to the exporter's lease.
#include "ipc_handles.h"
#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

GPOOL_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr p) {
  GPOOL_TRY
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_POINTER(conn, p);
  calls::IpcGetMemHandle::out::tuple out;
  if (int st = conn->call<calls::IpcGetMemHandle>(out, uint64_t{p})) return static_cast<CUresult>(st);
  return handleOut(handle, std::get<0>(out));
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, CUipcMemHandle handle, unsigned int flags) {
  GPOOL_TRY
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  calls::IpcOpenMemHandle::out::tuple out;
  auto r = static_cast<CUresult>(conn->call<calls::IpcOpenMemHandle>(out, handleIn(handle), uint32_t{flags}));
  if (r != CUDA_SUCCESS) return explainForeignHandle(r, "cuIpcOpenMemHandle");
  *p = std::get<0>(out).ptr;
  State::get().addAllocation(std::get<0>(out).ptr, std::get<0>(out).bytes, true);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr* p, CUipcMemHandle handle, unsigned int flags) {
  return cuIpcOpenMemHandle_v2(p, handle, flags);
}

GPOOL_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  GPOOL_TRY
  GPOOL_CONN_OF_POINTER(conn, p);
  int st = conn->call<calls::IpcCloseMemHandle>(uint64_t{p});
  if (st == CUDA_SUCCESS) State::get().removeAllocation(p);
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle* handle, CUevent e) {
  GPOOL_TRY
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, reinterpret_cast<uint64_t>(e));
  calls::IpcGetEventHandle::out::tuple out;
  if (int st = conn->call<calls::IpcGetEventHandle>(out, reinterpret_cast<uint64_t>(e))) return static_cast<CUresult>(st);
  return handleOut(handle, std::get<0>(out));
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuIpcOpenEventHandle(CUevent* e, CUipcEventHandle handle) {
  GPOOL_TRY
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  calls::IpcOpenEventHandle::out::tuple out;
  auto r = static_cast<CUresult>(conn->call<calls::IpcOpenEventHandle>(out, handleIn(handle)));
  if (r != CUDA_SUCCESS) return explainForeignHandle(r, "cuIpcOpenEventHandle");
  *e = reinterpret_cast<CUevent>(std::get<0>(out).v);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
