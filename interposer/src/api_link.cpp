// JIT linking (cuLinkCreate/AddData/AddFile/Complete/Destroy): PTX and cubins are compiled and linked by
// the worker's driver, which owns the link state; this side keeps the caller's log buffers and the linked
// image, which the caller may read until cuLinkDestroy. Files are read here, where their paths mean
// something, and sent as data.
#include <algorithm>
#include <fstream>
#include <iterator>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

struct LogBuffer {
  char* data = nullptr;
  size_t size = 0;
};
struct ClientLink {
  LogBuffer info, error;
  std::vector<uint8_t> image;  // the linked output, valid until cuLinkDestroy
};

std::mutex g_mu;
std::unordered_map<uint64_t, ClientLink> g_links;

uint64_t raw(CUlinkState s) { return reinterpret_cast<uint64_t>(s); }

void copyLog(const LogBuffer& to, const std::vector<char>& log) {
  if (!to.data || to.size == 0) return;
  size_t n = std::min(to.size - 1, log.size());
  std::copy_n(log.begin(), n, to.data);
  to.data[n] = '\0';
}

// Splits the caller's options into numeric ones the worker applies and the log buffers kept here.
void splitOptions(unsigned n, const CUjit_option* ids, void* const* values, gpool::proto::JitOptions& numeric, ClientLink& link) {
  for (unsigned i = 0; i < n && ids && values; ++i) {
    auto v = reinterpret_cast<uint64_t>(values[i]);
    switch (ids[i]) {
      case CU_JIT_INFO_LOG_BUFFER: link.info.data = static_cast<char*>(values[i]); break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: link.info.size = v; break;
      case CU_JIT_ERROR_LOG_BUFFER: link.error.data = static_cast<char*>(values[i]); break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: link.error.size = v; break;
      default:
        if (gpool::proto::JitOptions::numeric(ids[i])) {
          numeric.ids.push_back(ids[i]);
          numeric.values.push_back(v);
        } else {
          GPOOL_LOG(Level::kInfo, "JIT option %d is not forwarded (its value is an address on this machine)", static_cast<int>(ids[i]));
        }
    }
  }
}

CUresult addData(CUlinkState state, CUjitInputType type, const void* data, size_t size, const char* name) {
  if (!data || size == 0) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  calls::LinkAddData::out::tuple out;
  int st = conn->call<calls::LinkAddData>(out, raw(state), static_cast<uint32_t>(type), gpool::proto::Blob{data, size},
                                          std::string(name ? name : ""));
  std::lock_guard lock(g_mu);
  if (auto it = g_links.find(raw(state)); it != g_links.end()) copyLog(it->second.error, std::get<0>(out));
  return static_cast<CUresult>(st);
}

CUresult addFile(CUlinkState state, CUjitInputType type, const char* path) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream in(path, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (type == CU_JIT_INPUT_PTX) bytes.push_back('\0');
  return addData(state, type, bytes.data(), bytes.size(), path);
}

}  // namespace

namespace gpool::client {
void forgetLinks() {
  std::lock_guard lock(g_mu);
  g_links.clear();
}

void clearJitLogs(unsigned n, const CUjit_option* ids, void* const* values) {
  ClientLink link;
  gpool::proto::JitOptions ignored;
  splitOptions(n, ids, values, ignored, link);
  copyLog(link.info, {});
  copyLog(link.error, {});
}
}  // namespace gpool::client

GPOOL_EXPORT CUresult cuLinkCreate_v2(unsigned int n, CUjit_option* ids, void** values, CUlinkState* state) {
  GPOOL_TRY
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  ClientLink link;
  gpool::proto::JitOptions numeric;
  splitOptions(n, ids, values, numeric, link);
  calls::LinkCreate::out::tuple out;
  int st = conn->call<calls::LinkCreate>(out, numeric);
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  *state = reinterpret_cast<CUlinkState>(std::get<0>(out).v);
  std::lock_guard lock(g_mu);
  g_links[std::get<0>(out).v] = std::move(link);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLinkCreate(unsigned int n, CUjit_option* ids, void** values, CUlinkState* state) {
  return cuLinkCreate_v2(n, ids, values, state);
}

// Per-input options only tune the worker's compiler; its defaults apply.
GPOOL_EXPORT CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void* data, size_t size, const char* name,
                                       unsigned int, CUjit_option*, void**) {
  GPOOL_TRY return addData(state, type, data, size, name); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void* data, size_t size, const char* name,
                                    unsigned int, CUjit_option*, void**) {
  GPOOL_TRY return addData(state, type, data, size, name); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char* path, unsigned int, CUjit_option*, void**) {
  GPOOL_TRY return addFile(state, type, path); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char* path, unsigned int, CUjit_option*, void**) {
  GPOOL_TRY return addFile(state, type, path); GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuLinkComplete(CUlinkState state, void** image, size_t* size) {
  GPOOL_TRY
  if (!image || !size) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  calls::LinkComplete::out::tuple out;
  int st = conn->call<calls::LinkComplete>(out, raw(state));
  std::lock_guard lock(g_mu);
  auto it = g_links.find(raw(state));
  if (it == g_links.end()) return st ? static_cast<CUresult>(st) : CUDA_ERROR_INVALID_HANDLE;
  copyLog(it->second.info, std::get<1>(out));
  copyLog(it->second.error, std::get<2>(out));
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  it->second.image = std::move(std::get<0>(out));
  *image = it->second.image.data();
  *size = it->second.image.size();
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuLinkDestroy(CUlinkState state) {
  GPOOL_TRY
  GPOOL_CONN(conn);
  {
    std::lock_guard lock(g_mu);
    if (g_links.erase(raw(state)) == 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  return static_cast<CUresult>(conn->post<calls::LinkDestroy>(raw(state)));
  GPOOL_CATCH
}
