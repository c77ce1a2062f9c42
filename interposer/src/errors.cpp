// cuGetErrorName / cuGetErrorString, answered locally (names generated from cuda.h).
#include "driver_table.h"
#include "state.h"

using namespace gpool::client;

namespace {

const char* errorName(CUresult e) {
  for (unsigned i = 0; i < kErrorNameCount; ++i)
    if (kErrorNames[i].code == static_cast<int>(e)) return kErrorNames[i].name;
  return nullptr;
}

// The driver's own wording for the errors programs most often print.
const char* errorString(CUresult e) {
  switch (e) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_DEINITIALIZED: return "driver shutting down";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return "CUDA-capable device(s) is/are busy or unavailable";
    case CUDA_ERROR_INVALID_IMAGE: return "device kernel image is invalid";
    case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
    case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
    case CUDA_ERROR_NOT_READY: return "device not ready";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
    case CUDA_ERROR_LAUNCH_FAILED: return "unspecified launch failure";
    case CUDA_ERROR_NOT_SUPPORTED: return "operation not supported";
    case CUDA_ERROR_FILE_NOT_FOUND: return "file not found";
    case CUDA_ERROR_UNKNOWN: return "unknown error";
    default: return nullptr;
  }
}

}  // namespace

GPOOL_EXPORT CUresult cuGetErrorName(CUresult e, const char** out) {
  GPOOL_TRY
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = errorName(e);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGetErrorString(CUresult e, const char** out) {
  GPOOL_TRY
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  const char* s = errorString(e);
  *out = s ? s : errorName(e);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuProfilerStart() { return CUDA_SUCCESS; }
GPOOL_EXPORT CUresult cuProfilerStop() { return CUDA_SUCCESS; }
