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

Rows rowsOf(uint64_t address, uint64_t pitch) { return Rows{reinterpret_cast<uint8_t*>(address), pitch}; }

// `height` rows of `width` bytes (every copy below).
void copyRows(Rows dst, Rows src, uint64_t width, uint64_t height) {
  for (uint64_t y = 0; y < height; ++y) std::memmove(dst.first + y * dst.pitch, src.first + y * src.pitch, width);
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
  copyRows(rowsOf(a.storage, a.shape, w.dst), rowsOf(reinterpret_cast<uint64_t>(w.data.data), w.dst.width), w.dst.width, w.dst.height);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyAtoH2D(ArrayRect r, Stream stream, std::vector<uint8_t>& rows) {
  if (Capture* c = capturing(stream)) return refuseInCapture(*c, "an array-to-host copy");
  const SimArray& a = arrays_.at(r.array);
  rows.resize(r.width * r.height);
  copyRows(rowsOf(reinterpret_cast<uint64_t>(rows.data()), r.width), rowsOf(a.storage, a.shape, r), r.width, r.height);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyDtoA2D(ArrayDevCopy c, Stream stream, uint32_t) {
  const SimArray& a = arrays_.at(c.array.array);
  issue(stream, [this, c, shape = a.shape, storage = a.storage] {
    if (reachable(c.device.ptr, c.device.span()))
      copyRows(rowsOf(storage, shape, c.array), rowsOf(c.device.ptr, c.device.pitch), c.array.width, c.array.height);
  }, CU_GRAPH_NODE_TYPE_MEMCPY);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyAtoD2D(ArrayDevCopy c, Stream stream, uint32_t) {
  const SimArray& a = arrays_.at(c.array.array);
  issue(stream, [this, c, shape = a.shape, storage = a.storage] {
    if (reachable(c.device.ptr, c.device.span()))
      copyRows(rowsOf(c.device.ptr, c.device.pitch), rowsOf(storage, shape, c.array), c.array.width, c.array.height);
  }, CU_GRAPH_NODE_TYPE_MEMCPY);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyAtoA2D(ArrayCopy c, Stream stream, uint32_t) {
  const SimArray &d = arrays_.at(c.dst.array), &s = arrays_.at(c.src.array);
  issue(stream, [c, d, s] {
    copyRows(rowsOf(d.storage, d.shape, c.dst), rowsOf(s.storage, s.shape, c.src), c.dst.width, c.dst.height);
  }, CU_GRAPH_NODE_TYPE_MEMCPY);
  return CUDA_SUCCESS;
}

Status SimBackend::TexObjectCreate(TexResource, TexDescs, Created<TexObject>& out) {
  out = newHandle(HandleKind::kTexObject);
  return CUDA_SUCCESS;
}

Status SimBackend::TexObjectDestroy(Released<TexObject>) { return CUDA_SUCCESS; }

Status SimBackend::SurfObjectCreate(TexResource r, Created<SurfObject>& out) {
  // Over any array, as NVIDIA's driver allows (an H200's made one over an array without SURFACE_LDST).
  if (r.type != CU_RESOURCE_TYPE_ARRAY) return CUDA_ERROR_INVALID_VALUE;
  out = newHandle(HandleKind::kSurfObject);
  return CUDA_SUCCESS;
}

Status SimBackend::SurfObjectDestroy(Released<SurfObject>) { return CUDA_SUCCESS; }

}  // namespace gpool::worker
