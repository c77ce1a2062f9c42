// The execution control CUDA deprecated (cuFuncSetBlockShape, cuFuncSetSharedSize, cuParamSet*, cuLaunch,
// cuLaunchGrid, cuLaunchGridAsync), as older programs and bindings still call it: each function's block
// shape, dynamic shared memory and argument bytes are kept here, and a launch is cuLaunchKernel with that
// buffer as its `extra` argument. Texture references (cuParamSetTexRef) are not forwarded.
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "state.h"

using namespace gpool::client;

namespace {

struct LegacySetup {
  unsigned block[3] = {1, 1, 1};
  unsigned shared = 0;
  std::vector<uint8_t> params;
};

std::mutex g_mu;
std::unordered_map<uint64_t, LegacySetup> g_setups;  // by CUfunction

constexpr size_t kMaxParamBytes = 32764;  // what a kernel may take (CUDA 12.1 and later)

// Runs f on the function's setup under the lock.
template <typename F>
CUresult withSetup(CUfunction f, F fn) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(g_mu);
  return fn(g_setups[reinterpret_cast<uint64_t>(f)]);
}

// Writes `bytes` at `offset` of the argument bytes, which grow to hold them.
CUresult setParam(CUfunction f, int offset, const void* data, size_t bytes) {
  if (offset < 0 || !data || bytes > kMaxParamBytes || static_cast<size_t>(offset) > kMaxParamBytes - bytes)
    return CUDA_ERROR_INVALID_VALUE;
  return withSetup(f, [&](LegacySetup& s) {
    if (s.params.size() < offset + bytes) s.params.resize(offset + bytes);
    std::memcpy(s.params.data() + offset, data, bytes);
    return CUDA_SUCCESS;
  });
}

CUresult launchGrid(CUfunction f, int width, int height, CUstream stream) {
  if (width <= 0 || height <= 0) return CUDA_ERROR_INVALID_VALUE;
  LegacySetup s;
  if (CUresult r = withSetup(f, [&](LegacySetup& kept) { s = kept; return CUDA_SUCCESS; })) return r;
  size_t size = s.params.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, s.params.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  return cuLaunchKernel(f, static_cast<unsigned>(width), static_cast<unsigned>(height), 1, s.block[0], s.block[1], s.block[2],
                        s.shared, stream, nullptr, size ? extra : nullptr);
}

}  // namespace

GPOOL_EXPORT CUresult cuFuncSetBlockShape(CUfunction f, int x, int y, int z) {
  GPOOL_TRY
  if (x <= 0 || y <= 0 || z <= 0) return CUDA_ERROR_INVALID_VALUE;
  return withSetup(f, [&](LegacySetup& s) {
    s.block[0] = static_cast<unsigned>(x), s.block[1] = static_cast<unsigned>(y), s.block[2] = static_cast<unsigned>(z);
    return CUDA_SUCCESS;
  });
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuFuncSetSharedSize(CUfunction f, unsigned bytes) {
  GPOOL_TRY return withSetup(f, [&](LegacySetup& s) { s.shared = bytes; return CUDA_SUCCESS; }); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuParamSetSize(CUfunction f, unsigned bytes) {
  GPOOL_TRY
  if (bytes > kMaxParamBytes) return CUDA_ERROR_INVALID_VALUE;
  return withSetup(f, [&](LegacySetup& s) { s.params.resize(bytes); return CUDA_SUCCESS; });
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuParamSeti(CUfunction f, int offset, unsigned value) {
  GPOOL_TRY return setParam(f, offset, &value, sizeof value); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuParamSetf(CUfunction f, int offset, float value) {
  GPOOL_TRY return setParam(f, offset, &value, sizeof value); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuParamSetv(CUfunction f, int offset, void* data, unsigned bytes) {
  GPOOL_TRY return setParam(f, offset, data, bytes); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLaunch(CUfunction f) { GPOOL_TRY return launchGrid(f, 1, 1, nullptr); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuLaunchGrid(CUfunction f, int width, int height) { GPOOL_TRY return launchGrid(f, width, height, nullptr); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int width, int height, CUstream s) {
  GPOOL_TRY return launchGrid(f, width, height, s); GPOOL_CATCH
}
