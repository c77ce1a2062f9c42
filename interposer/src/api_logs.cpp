// CUDA's error log (cuLogs*, CUDA 12.9; cudaLogs* in the runtime): the messages a driver keeps about the
// calls that failed, for a program to read or be called with. Here they are gpool's own warnings and
// errors, the lines it writes to stderr: why a call is not supported, what the lease refused, a lost
// server; log.cpp keeps them as the driver keeps its own.
#include <cstdio>
#include <cstring>

#include "state.h"

using namespace gpool::client;
namespace dlog = gpool::client::driver_log;

GPOOL_EXPORT CUresult cuLogsRegisterCallback(CUlogsCallback fn, void* data, CUlogsCallbackHandle* out) {
  GPOOL_TRY
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  auto h = static_cast<CUlogsCallbackHandle>(dlog::subscribe(reinterpret_cast<dlog::Callback>(fn), data));
  if (out) *out = h;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle h) {
  GPOOL_TRY return h && dlog::unsubscribe(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuLogsCurrent(CUlogIterator* out, unsigned int flags) {
  GPOOL_TRY
  if (!out || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *out = dlog::current();
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// Nothing to dump is 0 bytes and success; a buffer too small for any message is 0 bytes and
// CUDA_ERROR_INVALID_VALUE (the iterator stays).
GPOOL_EXPORT CUresult cuLogsDumpToMemory(CUlogIterator* from, char* buffer, size_t* size, unsigned int flags) {
  GPOOL_TRY
  if (!buffer || !size || *size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  dlog::Dump d = dlog::dump(from, *size - 1);
  std::memcpy(buffer, d.text.data(), d.text.size());
  buffer[d.text.size()] = '\0';
  *size = d.text.size();
  return d.none_fit ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuLogsDumpToFile(CUlogIterator* from, const char* path, unsigned int flags) {
  GPOOL_TRY
  if (!path || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::FILE* f = std::fopen(path, "a");
  if (!f) return CUDA_ERROR_INVALID_VALUE;
  const std::string text = dlog::dump(from, 2 * dlog::kKeptBytes).text;
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && written ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  GPOOL_CATCH
}
