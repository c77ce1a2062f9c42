// The sim backend's CUDA arrays: each is host memory laid out as dense rows (rowBytes apart) and slices
// (rows() rows apart), which is all a copy can tell. The worker checked every rectangle against the array
// (request_checks.cpp); copies between an array and device memory run in stream order, as DtoD copies do.
// Texture and surface objects are handles over them (no kernel samples them on the sim); a surface needs
// an array made for surfaces, as the driver says.
#include <cuda.h>

#include <cstring>

#include "sim_backend.h"

namespace gpool::worker {

namespace {

// Where a rectangle's first row starts, and how far apart its rows are, in an array's storage.
struct Rows {
  uint8_t* first;
  uint64_t pitch;
};

Rows rowsOf(const std::shared_ptr<std::vector<uint8_t>>& storage, const ArrayShape& a, const ArrayRect& r) {
  const uint64_t pitch = a.rowBytes();
  return Rows{storage->data() + (r.z * a.rows() + r.y) * pitch + r.x, pitch};
}

}  // namespace

Status SimBackend::ArrayCreate(ArrayShape a, Created<Array>& out) {
  out = newHandle(HandleKind::kArray);
  arrays_[out.v] = SimArray{a, std::make_shared<std::vector<uint8_t>>(a.bytes())};
  return CUDA_SUCCESS;
}

Status SimBackend::ArrayDestroy(Released<Array> a) {
  arrays_.erase(a.v);  // (a captured copy holds the storage until its graph goes)
  return CUDA_SUCCESS;
}

// A mipmapped array: its levels' storage made at once; each level's handle, on first asking.
Status SimBackend::MipmappedArrayCreate(MipmapShape m, Created<MipmappedArray>& out) {
  out = newHandle(HandleKind::kMipmappedArray);
  SimMipmap& mm = mipmaps_[out.v];
  for (uint32_t l = 0; l < m.levels; ++l) {
    ArrayShape a = m.level(l);
    mm.levels.push_back(SimArray{a, std::make_shared<std::vector<uint8_t>>(a.bytes())});
  }
  mm.handles.assign(m.levels, 0);
  return CUDA_SUCCESS;
}

Status SimBackend::MipmappedArrayGetLevel(MipmapLevel l, Created<Array>& out) {
  SimMipmap& mm = mipmaps_.at(l.mipmap);
  uint64_t& h = mm.handles.at(l.level);
  if (h == 0) {
    h = newHandle(HandleKind::kArray);
    arrays_[h] = mm.levels[l.level];
  }
  out = h;
  return CUDA_SUCCESS;
}

Status SimBackend::MipmappedArrayDestroy(Released<MipmappedArray> m) {
  for (uint64_t h : mipmaps_.at(m).handles) arrays_.erase(h);
  mipmaps_.erase(m);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyHtoA2D(ArrayWrite w, Stream stream, uint32_t) {
  if (Capture* c = capturing(stream)) return refuseInCapture(*c, "a host-to-array copy");
  const SimArray& a = arrays_.at(w.dst.array);
  Rows dst = rowsOf(a.storage, a.shape, w.dst);
  const auto* src = static_cast<const uint8_t*>(w.data.data);
  for (uint64_t y = 0; y < w.dst.height; ++y) std::memcpy(dst.first + y * dst.pitch, src + y * w.dst.width, w.dst.width);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyAtoH2D(ArrayRect r, Stream stream, std::vector<uint8_t>& rows) {
  if (Capture* c = capturing(stream)) return refuseInCapture(*c, "an array-to-host copy");
  const SimArray& a = arrays_.at(r.array);
  Rows src = rowsOf(a.storage, a.shape, r);
  rows.resize(r.width * r.height);
  for (uint64_t y = 0; y < r.height; ++y) std::memcpy(rows.data() + y * r.width, src.first + y * src.pitch, r.width);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyDtoA2D(ArrayDevCopy c, Stream stream, uint32_t) {
  const SimArray& a = arrays_.at(c.array.array);
  issue(stream, [this, c, shape = a.shape, storage = a.storage] {
    if (!reachable(c.device.ptr, c.device.span())) return;
    Rows dst = rowsOf(storage, shape, c.array);
    for (uint64_t y = 0; y < c.array.height; ++y)
      std::memcpy(dst.first + y * dst.pitch, reinterpret_cast<const void*>(c.device.ptr + y * c.device.pitch), c.array.width);
  }, CU_GRAPH_NODE_TYPE_MEMCPY);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyAtoD2D(ArrayDevCopy c, Stream stream, uint32_t) {
  const SimArray& a = arrays_.at(c.array.array);
  issue(stream, [this, c, shape = a.shape, storage = a.storage] {
    if (!reachable(c.device.ptr, c.device.span())) return;
    Rows src = rowsOf(storage, shape, c.array);
    for (uint64_t y = 0; y < c.array.height; ++y)
      std::memcpy(reinterpret_cast<void*>(c.device.ptr + y * c.device.pitch), src.first + y * src.pitch, c.array.width);
  }, CU_GRAPH_NODE_TYPE_MEMCPY);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyAtoA2D(ArrayCopy c, Stream stream, uint32_t) {
  const SimArray &d = arrays_.at(c.dst.array), &s = arrays_.at(c.src.array);
  issue(stream, [c, d, s] {
    Rows dst = rowsOf(d.storage, d.shape, c.dst), src = rowsOf(s.storage, s.shape, c.src);
    for (uint64_t y = 0; y < c.dst.height; ++y) std::memmove(dst.first + y * dst.pitch, src.first + y * src.pitch, c.dst.width);
  }, CU_GRAPH_NODE_TYPE_MEMCPY);
  return CUDA_SUCCESS;
}

Status SimBackend::TexObjectCreate(TexResource, TexDescs, Created<TexObject>& out) {
  out = newHandle(HandleKind::kTexObject);
  return CUDA_SUCCESS;
}

Status SimBackend::TexObjectDestroy(Released<TexObject>) { return CUDA_SUCCESS; }

Status SimBackend::SurfObjectCreate(TexResource r, Created<SurfObject>& out) {
  if (r.type != CU_RESOURCE_TYPE_ARRAY || !(arrays_.at(r.array).shape.flags & CUDA_ARRAY3D_SURFACE_LDST)) return CUDA_ERROR_INVALID_VALUE;
  out = newHandle(HandleKind::kSurfObject);
  return CUDA_SUCCESS;
}

Status SimBackend::SurfObjectDestroy(Released<SurfObject>) { return CUDA_SUCCESS; }

}  // namespace gpool::worker
