// Texture and surface objects (cuTexObject*, cuSurfObject*): made by the worker over an array or device
// memory. Their values are kernel arguments, so they travel unmarked (handle_tags.h); this library keeps
// which connection made each, and the descriptors it was made from, which the Get*Desc calls give back.
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;
using gpool::proto::TexResource;

namespace {

struct TexRecord {
  CUDA_RESOURCE_DESC resource{};
  CUDA_TEXTURE_DESC texture{};
  bool has_view = false;
  CUDA_RESOURCE_VIEW_DESC view{};
};

std::mutex g_mu;
std::map<std::pair<int, uint64_t>, TexRecord> g_textures;  // (connection, value) -> how it was made
std::map<std::pair<int, uint64_t>, CUDA_RESOURCE_DESC> g_surfaces;

// The resource as the worker checks it; false for a type CUDA does not have.
bool toResource(const CUDA_RESOURCE_DESC& d, TexResource& r) {
  r = TexResource{};
  r.type = static_cast<uint32_t>(d.resType);
  r.flags = d.flags;
  switch (d.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      r.array = reinterpret_cast<uint64_t>(d.res.array.hArray);
      return true;
    case CU_RESOURCE_TYPE_LINEAR:
      r.ptr = d.res.linear.devPtr;
      r.bytes = d.res.linear.sizeInBytes;
      r.format = static_cast<uint32_t>(d.res.linear.format);
      r.channels = d.res.linear.numChannels;
      return true;
    case CU_RESOURCE_TYPE_PITCH2D:
      r.ptr = d.res.pitch2D.devPtr;
      r.pitch = d.res.pitch2D.pitchInBytes;
      r.width = d.res.pitch2D.width;
      r.height = d.res.pitch2D.height;
      r.format = static_cast<uint32_t>(d.res.pitch2D.format);
      r.channels = d.res.pitch2D.numChannels;
      return true;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      r.mipmap = reinterpret_cast<uint64_t>(d.res.mipmap.hMipmappedArray);
      return true;
    default:
      return false;
  }
}

template <typename T>
std::vector<uint8_t> bytesOf(const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  return std::vector<uint8_t>(p, p + sizeof v);
}

// The current device's connection (-1: none), found before g_mu is taken (it may connect).
int currentConnection() {
  CUresult err;
  Connection* c = State::get().ready(err);
  return c ? c->index() : -1;
}

// The record of `value` made through connection `current`, else through any (under g_mu). Two workers
// may give the same value; then it means the current device's, as a context's would in CUDA.
template <typename Map>
typename Map::iterator find(Map& m, uint64_t value, int current) {
  if (auto it = m.find({current, value}); it != m.end()) return it;
  for (auto it = m.begin(); it != m.end(); ++it)
    if (it->first.second == value) return it;
  return m.end();
}

// Ends the object `value` names on the worker that made it. Object 0 is none, which CUDA destroys without
// complaint (NVIDIA's volumeFiltering sample destroys the surface object it never made).
template <typename Call, typename Map>
CUresult destroy(Map& m, uint64_t value) {
  if (value == 0) return CUDA_SUCCESS;
  int connection;
  const int current = currentConnection();
  {
    std::lock_guard lock(g_mu);
    auto it = find(m, value, current);
    if (it == m.end()) return CUDA_ERROR_INVALID_VALUE;
    connection = it->first.first;
  }
  GPOOL_CONN_OF_DEVICE(conn, State::get().deviceOfConnection(connection));
  if (int st = conn->call<Call>(value)) return static_cast<CUresult>(st);
  std::lock_guard lock(g_mu);
  m.erase({connection, value});
  return CUDA_SUCCESS;
}

// *out = what `pick` gives of the record of `value` (nullptr: it has none).
template <typename Map, typename Out, typename Pick>
CUresult describe(Map& m, uint64_t value, Out* out, Pick pick) {
  const int current = currentConnection();
  std::lock_guard lock(g_mu);
  auto it = find(m, value, current);
  const Out* v = it == m.end() ? nullptr : pick(it->second);
  if (!out || !v) return CUDA_ERROR_INVALID_VALUE;
  *out = *v;
  return CUDA_SUCCESS;
}

}  // namespace

GPOOL_EXPORT CUresult cuTexObjectCreate(CUtexObject* out, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex,
                                        const CUDA_RESOURCE_VIEW_DESC* view) {
  GPOOL_TRY
  if (!out || !res || !tex) return CUDA_ERROR_INVALID_VALUE;
  TexResource r;
  if (!toResource(*res, r)) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  gpool::proto::TexDescs descs{bytesOf(*tex), view ? bytesOf(*view) : std::vector<uint8_t>{}};
  calls::TexObjectCreate::out::tuple o;
  if (int st = conn->call<calls::TexObjectCreate>(o, r, descs)) return static_cast<CUresult>(st);
  const uint64_t value = std::get<0>(o).v;
  std::lock_guard lock(g_mu);
  g_textures[{conn->index(), value}] = TexRecord{*res, *tex, view != nullptr, view ? *view : CUDA_RESOURCE_VIEW_DESC{}};
  *out = value;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuTexObjectDestroy(CUtexObject t) { GPOOL_TRY return destroy<calls::TexObjectDestroy>(g_textures, t); GPOOL_CATCH }

GPOOL_EXPORT CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* out, CUtexObject t) {
  GPOOL_TRY return describe(g_textures, t, out, [](const TexRecord& r) { return &r.resource; }); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC* out, CUtexObject t) {
  GPOOL_TRY return describe(g_textures, t, out, [](const TexRecord& r) { return &r.texture; }); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC* out, CUtexObject t) {
  GPOOL_TRY return describe(g_textures, t, out, [](const TexRecord& r) { return r.has_view ? &r.view : nullptr; }); GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuSurfObjectCreate(CUsurfObject* out, const CUDA_RESOURCE_DESC* res) {
  GPOOL_TRY
  if (!out || !res) return CUDA_ERROR_INVALID_VALUE;
  if (res->resType != CU_RESOURCE_TYPE_ARRAY) return CUDA_ERROR_INVALID_VALUE;  // (surfaces are over arrays only)
  TexResource r;
  toResource(*res, r);
  GPOOL_CONN(conn);
  calls::SurfObjectCreate::out::tuple o;
  if (int st = conn->call<calls::SurfObjectCreate>(o, r)) return static_cast<CUresult>(st);
  const uint64_t value = std::get<0>(o).v;
  std::lock_guard lock(g_mu);
  g_surfaces[{conn->index(), value}] = *res;
  *out = value;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuSurfObjectDestroy(CUsurfObject s) { GPOOL_TRY return destroy<calls::SurfObjectDestroy>(g_surfaces, s); GPOOL_CATCH }

GPOOL_EXPORT CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* out, CUsurfObject s) {
  GPOOL_TRY return describe(g_surfaces, s, out, [](const CUDA_RESOURCE_DESC& r) { return &r; }); GPOOL_CATCH
}

void gpool::client::forgetTextures() {
  std::lock_guard lock(g_mu);
  g_textures.clear();
  g_surfaces.clear();
}
