// cuGetProcAddress (both forms): resolves a base name, a requested CUDA version and the stream flags to
// the exact ABI variant, from the table generated out of cudaTypedefs.h (CUDA-PRIVATE-INTERFACES.md §1).
#include <string_view>
#include <unordered_map>
#include <vector>

#include "driver_table.h"
#include "state.h"

using namespace gpool::client;

namespace {

const std::unordered_map<std::string_view, std::vector<const DriverSymbol*>>& index() {
  static const auto* idx = [] {
    auto* m = new std::unordered_map<std::string_view, std::vector<const DriverSymbol*>>();
    for (unsigned i = 0; i < kDriverSymbolCount; ++i) (*m)[kDriverSymbols[i].name].push_back(&kDriverSymbols[i]);
    return m;
  }();
  return *idx;
}

}  // namespace

namespace gpool::client {

// The newest variant whose version is <= `version`; per-thread variants when asked for and present.
CUresult resolveProc(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  auto set = [&](CUdriverProcAddressQueryResult r) {
    if (status) *status = r;
  };
  auto it = index().find(symbol);
  if (it == index().end()) {
    set(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    GPOOL_LOG(Level::kDebug, "cuGetProcAddress(%s): no such driver function", symbol);
    return CUDA_ERROR_NOT_FOUND;
  }
  const bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const DriverSymbol* best_plain = nullptr;
  const DriverSymbol* best_pt = nullptr;
  for (const DriverSymbol* s : it->second) {
    if (s->version > version) continue;
    const DriverSymbol*& best = s->per_thread ? best_pt : best_plain;
    if (!best || s->version > best->version) best = s;
  }
  const DriverSymbol* pick = per_thread && best_pt ? best_pt : best_plain;
  if (!pick) {
    set(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = pick->address;
  set(CU_GET_PROC_ADDRESS_SUCCESS);
  return CUDA_SUCCESS;
}

}  // namespace gpool::client

GPOOL_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  GPOOL_TRY return resolveProc(symbol, pfn, version, flags, nullptr); GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* status) {
  GPOOL_TRY return resolveProc(symbol, pfn, version, flags, status); GPOOL_CATCH
}
