// The cuda backend's CUDA arrays, mipmapped arrays, their copies, and texture and surface objects.
#include "cuda_backend_class.h"

namespace gpool::worker {

// CUDA arrays: each copy is one slice's rectangle (request_checks.cpp checked it against the array).
CUDA_ARRAY3D_DESCRIPTOR CudaBackend::descriptor(const ArrayShape& a) {
  return CUDA_ARRAY3D_DESCRIPTOR{a.width, a.height, a.depth, static_cast<CUarray_format>(a.format), a.channels, a.flags};
}

Status CudaBackend::ArrayCreate(ArrayShape a, Created<Array>& out) {
  CUDA_ARRAY3D_DESCRIPTOR d = descriptor(a);
  CUarray array = nullptr;
  CUresult r = d_.cuArray3DCreate_(&array, &d);
  out = reinterpret_cast<uint64_t>(array);
  return r;
}

Status CudaBackend::MipmappedArrayCreate(MipmapShape m, Created<MipmappedArray>& out) {
  CUDA_ARRAY3D_DESCRIPTOR d = descriptor(m.base);
  CUmipmappedArray mipmap = nullptr;
  CUresult r = d_.cuMipmappedArrayCreate_(&mipmap, &d, m.levels);
  out = reinterpret_cast<uint64_t>(mipmap);
  return r;
}

Status CudaBackend::MipmappedArrayGetLevel(MipmapLevel l, Created<Array>& out) {
  CUarray level = nullptr;
  CUresult r = d_.cuMipmappedArrayGetLevel_(&level, reinterpret_cast<CUmipmappedArray>(l.mipmap.v), l.level);
  out = reinterpret_cast<uint64_t>(level);
  return r;
}

Status CudaBackend::MemcpyHtoA2D(ArrayWrite w, Stream stream, uint32_t async) {
  if (capturing(stream)) return refuseInCapture(stream, "a host-to-array copy");
  CUDA_MEMCPY3D c = slice(w.dst.width, w.dst.height);
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = w.data.data;
  c.srcPitch = w.dst.width;
  toArray(c, w.dst);
  if (!async) return d_.cuMemcpy3D_(&c);
  CUresult r = d_.cuMemcpy3DAsync_(&c, stream_(stream));
  return r != CUDA_SUCCESS ? r : holdSlot(w.data, stream);
}

Status CudaBackend::MemcpyAtoH2D(ArrayRect src, Stream stream, std::vector<uint8_t>& rows) {
  if (capturing(stream)) return refuseInCapture(stream, "an array-to-host copy");
  rows.resize(src.width * src.height);
  CUDA_MEMCPY3D c = slice(src.width, src.height);
  fromArray(c, src);
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = rows.data();
  c.dstPitch = src.width;
  CUresult r = d_.cuMemcpy3DAsync_(&c, stream_(stream));
  return r != CUDA_SUCCESS ? r : d_.cuStreamSynchronize_(stream_(stream));
}

Status CudaBackend::MemcpyDtoA2D(ArrayDevCopy dc, Stream stream, uint32_t async) {
  CUDA_MEMCPY3D c = slice(dc.array.width, dc.array.height);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = dc.device.ptr;
  c.srcPitch = dc.device.pitch;
  toArray(c, dc.array);
  return async ? d_.cuMemcpy3DAsync_(&c, stream_(stream)) : d_.cuMemcpy3D_(&c);
}

Status CudaBackend::MemcpyAtoD2D(ArrayDevCopy dc, Stream stream, uint32_t async) {
  CUDA_MEMCPY3D c = slice(dc.array.width, dc.array.height);
  fromArray(c, dc.array);
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dc.device.ptr;
  c.dstPitch = dc.device.pitch;
  return async ? d_.cuMemcpy3DAsync_(&c, stream_(stream)) : d_.cuMemcpy3D_(&c);
}

Status CudaBackend::MemcpyAtoA2D(ArrayCopy ac, Stream stream, uint32_t async) {
  CUDA_MEMCPY3D c = slice(ac.dst.width, ac.dst.height);
  fromArray(c, ac.src);
  toArray(c, ac.dst);
  return async ? d_.cuMemcpy3DAsync_(&c, stream_(stream)) : d_.cuMemcpy3D_(&c);
}

// Texture and surface objects: the resource as the driver takes it; the descriptors as the client sent them.
CUDA_RESOURCE_DESC CudaBackend::resource(const TexResource& r) {
  CUDA_RESOURCE_DESC d{};
  d.resType = static_cast<CUresourcetype>(r.type);
  if (r.type == CU_RESOURCE_TYPE_ARRAY) {
    d.res.array.hArray = reinterpret_cast<CUarray>(r.array.v);
  } else if (r.type == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
    d.res.mipmap.hMipmappedArray = reinterpret_cast<CUmipmappedArray>(r.mipmap.v);
  } else if (r.type == CU_RESOURCE_TYPE_LINEAR) {
    d.res.linear = {r.ptr, static_cast<CUarray_format>(r.format), r.channels, r.bytes};
  } else {
    d.res.pitch2D = {r.ptr, static_cast<CUarray_format>(r.format), r.channels, r.width, r.height, r.pitch};
  }
  return d;
}

Status CudaBackend::TexObjectCreate(TexResource r, TexDescs descs, Created<TexObject>& out) {
  static_assert(sizeof(CUDA_TEXTURE_DESC) == TexDescs::kTextureBytes && sizeof(CUDA_RESOURCE_VIEW_DESC) == TexDescs::kViewBytes);
  CUDA_RESOURCE_DESC res = resource(r);
  CUDA_TEXTURE_DESC tex;
  CUDA_RESOURCE_VIEW_DESC view;
  std::memcpy(&tex, descs.texture.data(), sizeof tex);
  if (!descs.view.empty()) std::memcpy(&view, descs.view.data(), sizeof view);
  CUtexObject t = 0;
  CUresult st = d_.cuTexObjectCreate_(&t, &res, &tex, descs.view.empty() ? nullptr : &view);
  out = t;
  return st;
}

Status CudaBackend::SurfObjectCreate(TexResource r, Created<SurfObject>& out) {
  CUDA_RESOURCE_DESC res = resource(r);
  CUsurfObject sobj = 0;
  CUresult st = d_.cuSurfObjectCreate_(&sobj, &res);
  out = sobj;
  return st;
}
}  // namespace gpool::worker
