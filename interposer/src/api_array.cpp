// CUDA arrays (cuArray*, cuMipmappedArray*, cuMemcpy{HtoA,AtoH,DtoA,AtoD,AtoA}): forwarded to the worker, which keeps the
// array on its GPU. This library keeps each array's shape, for cuArray*GetDescriptor and for the 1D copies,
// which take 1D arrays only.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "arrays.h"
#include "host_rows.h"
#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;
using gpool::proto::ArrayRect;
using gpool::proto::ArrayShape;
using gpool::proto::Blob;
using gpool::proto::DevRect;

namespace {

std::mutex g_mu;
std::unordered_map<uint64_t, ArrayShape> g_arrays;  // every array this process made or got (a mipmap's level), by handle
struct Mipmap {
  gpool::proto::MipmapShape shape;
  std::vector<uint64_t> levels;  // the level arrays handed out, which end with it
};
std::unordered_map<uint64_t, Mipmap> g_mipmaps;

uint64_t raw(CUarray a) { return reinterpret_cast<uint64_t>(a); }

CUresult create(CUarray* out, const ArrayShape& shape) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  calls::ArrayCreate::out::tuple r;
  int st = conn->call<calls::ArrayCreate>(r, shape);
  if (st == CUDA_ERROR_INVALID_VALUE && ArrayShape::formatBytes(shape.format) == 0)
    GPOOL_LOG(Level::kWarn, "a CUDA array of format %#x (planar video or block-compressed) is not supported by gpool", shape.format);
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  const uint64_t h = std::get<0>(r).v;
  {
    std::lock_guard lock(g_mu);
    g_arrays[h] = shape;
  }
  *out = reinterpret_cast<CUarray>(h);
  return CUDA_SUCCESS;
}

// The 1D copies (cuMemcpyHtoA, AtoH, AtoA, DtoA, AtoD) take 1D arrays only, as NVIDIA's driver does (it
// refused a 2D array's on an H200); a range must lie within the array.
bool holds(const ArrayShape& a, uint64_t offset, uint64_t bytes) {
  return a.rows() == 1 && a.slices() == 1 && offset <= a.bytes() && bytes <= a.bytes() - offset;
}
// The `n` bytes at linear offset `at`, which lie within one row.
ArrayRect rowPiece(uint64_t array, const ArrayShape& a, uint64_t at, uint64_t n) {
  const uint64_t k = at / a.rowBytes();
  return ArrayRect{array, at % a.rowBytes(), k % a.rows(), k / a.rows(), n, 1};
}

// Calls f(rect, offset into the linear range) for each row piece of [offset, offset+bytes). Stops at the
// first failure.
template <typename F>
CUresult eachRowPiece(uint64_t array, uint64_t offset, uint64_t bytes, F&& f) {
  ArrayShape a;
  if (!arrays::shapeOf(array, a)) return CUDA_ERROR_INVALID_HANDLE;
  if (!holds(a, offset, bytes)) return CUDA_ERROR_INVALID_VALUE;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(bytes - done, a.rowBytes() - (offset + done) % a.rowBytes());
    if (CUresult st = f(rowPiece(array, a, offset + done, n), done)) return st;
    done += n;
  }
  return CUDA_SUCCESS;
}

// A descriptor as the worker takes it.
ArrayShape shapeFrom(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  return ArrayShape{d.Width, d.Height, d.Depth, static_cast<uint32_t>(d.Format), d.NumChannels, d.Flags};
}

// The shape of `a` for a cuArray*GetDescriptor call that writes to `out`.
CUresult describe(const void* out, CUarray a, ArrayShape& s) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  return arrays::shapeOf(raw(a), s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // namespace

bool arrays::shapeOf(uint64_t array, ArrayShape& out) {
  std::lock_guard lock(g_mu);
  auto it = g_arrays.find(array);
  if (it == g_arrays.end()) return false;
  out = it->second;
  return true;
}

// Each copy goes to the worker of the array's device, whichever device is current.
CUresult arrays::hostToArray(const ArrayRect& dst, const uint8_t* src, uint64_t pitch, uint64_t stream, bool async) {
  GPOOL_CONN_OF_HANDLE(conn, dst.array.v);
  std::vector<uint8_t> packed;
  for (uint64_t y = 0, step = rowsPerMessage(dst.width); y < dst.height; y += step) {
    const uint64_t rows = std::min(step, dst.height - y);
    packed.resize(dst.width * rows);
    packRows(packed.data(), src + y * pitch, pitch, dst.width, rows);
    ArrayRect part = dst;
    part.y += y;
    part.height = rows;
    gpool::proto::ArrayWrite w{part, Blob{packed.data(), packed.size()}};
    const bool last = y + rows == dst.height;
    int st = (last && !async) ? conn->call<calls::MemcpyHtoA2D>(w, stream, 0u) : conn->post<calls::MemcpyHtoA2D>(w, stream, async ? 1u : 0u);
    if (st) return static_cast<CUresult>(st);
  }
  return CUDA_SUCCESS;
}

// Always complete when it returns, as the device-to-host copies.
CUresult arrays::arrayToHost(const ArrayRect& src, uint8_t* dst, uint64_t pitch, uint64_t stream) {
  GPOOL_CONN_OF_HANDLE(conn, src.array.v);
  for (uint64_t y = 0, step = rowsPerMessage(src.width); y < src.height; y += step) {
    const uint64_t rows = std::min(step, src.height - y);
    ArrayRect part = src;
    part.y += y;
    part.height = rows;
    calls::MemcpyAtoH2D::out::tuple r;
    if (int st = conn->call<calls::MemcpyAtoH2D>(r, part, stream)) return static_cast<CUresult>(st);
    const std::vector<uint8_t>& packed = std::get<0>(r);
    if (packed.size() != src.width * rows) return CUDA_ERROR_UNKNOWN;
    unpackRows(dst + y * pitch, pitch, packed.data(), src.width, rows);
  }
  return CUDA_SUCCESS;
}

CUresult arrays::deviceToArray(const ArrayRect& dst, const DevRect& src, uint64_t stream, bool async) {
  GPOOL_CONN_OF_HANDLE(conn, dst.array.v);
  gpool::proto::ArrayDevCopy c{dst, src};
  return static_cast<CUresult>(async ? conn->post<calls::MemcpyDtoA2D>(c, stream, 1u) : conn->call<calls::MemcpyDtoA2D>(c, stream, 0u));
}

CUresult arrays::arrayToDevice(const DevRect& dst, const ArrayRect& src, uint64_t stream, bool async) {
  GPOOL_CONN_OF_HANDLE(conn, src.array.v);
  gpool::proto::ArrayDevCopy c{src, dst};
  return static_cast<CUresult>(async ? conn->post<calls::MemcpyAtoD2D>(c, stream, 1u) : conn->call<calls::MemcpyAtoD2D>(c, stream, 0u));
}

CUresult arrays::arrayToArray(const ArrayRect& dst, const ArrayRect& src, uint64_t stream, bool async) {
  GPOOL_CONN_OF_HANDLE(conn, dst.array.v);
  gpool::proto::ArrayCopy c{dst, src};
  return static_cast<CUresult>(async ? conn->post<calls::MemcpyAtoA2D>(c, stream, 1u) : conn->call<calls::MemcpyAtoA2D>(c, stream, 0u));
}

void gpool::client::forgetArrays() {
  std::lock_guard lock(g_mu);
  g_arrays.clear();
  g_mipmaps.clear();
}

GPOOL_EXPORT CUresult cuArrayCreate_v2(CUarray* out, const CUDA_ARRAY_DESCRIPTOR* d) {
  GPOOL_TRY
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  return create(out, ArrayShape{d->Width, d->Height, 0, static_cast<uint32_t>(d->Format), d->NumChannels, 0});
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuArray3DCreate_v2(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  GPOOL_TRY
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  return create(out, shapeFrom(*d));
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuArrayDestroy(CUarray a) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, raw(a));
  if (int st = conn->call<calls::ArrayDestroy>(raw(a))) return static_cast<CUresult>(st);
  std::lock_guard lock(g_mu);
  g_arrays.erase(raw(a));
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* d, CUarray a) {
  GPOOL_TRY
  ArrayShape s;
  if (CUresult r = describe(d, a, s)) return r;
  *d = CUDA_ARRAY3D_DESCRIPTOR{s.width, s.height, s.depth, static_cast<CUarray_format>(s.format), s.channels, s.flags};
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* d, CUarray a) {
  GPOOL_TRY
  ArrayShape s;
  if (CUresult r = describe(d, a, s)) return r;
  if (s.depth != 0) return CUDA_ERROR_INVALID_VALUE;  // a 3D array: cuArray3DGetDescriptor
  *d = CUDA_ARRAY_DESCRIPTOR{s.width, s.height, static_cast<CUarray_format>(s.format), s.channels};
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// Mipmapped arrays: each level the program asks for is an array, whose shape this library keeps.
GPOOL_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned int levels) {
  GPOOL_TRY
  if (!out || !d) return CUDA_ERROR_INVALID_VALUE;
  gpool::proto::MipmapShape shape{shapeFrom(*d), levels};
  GPOOL_CONN(conn);
  calls::MipmappedArrayCreate::out::tuple r;
  if (int st = conn->call<calls::MipmappedArrayCreate>(r, shape)) return static_cast<CUresult>(st);
  const uint64_t h = std::get<0>(r).v;
  std::lock_guard lock(g_mu);
  g_mipmaps[h] = Mipmap{shape, {}};
  *out = reinterpret_cast<CUmipmappedArray>(h);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMipmappedArrayGetLevel(CUarray* out, CUmipmappedArray m, unsigned int level) {
  GPOOL_TRY
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t mh = reinterpret_cast<uint64_t>(m);
  GPOOL_CONN_OF_HANDLE(conn, mh);
  calls::MipmappedArrayGetLevel::out::tuple r;
  if (int st = conn->call<calls::MipmappedArrayGetLevel>(r, gpool::proto::MipmapLevel{mh, level})) return static_cast<CUresult>(st);
  const uint64_t h = std::get<0>(r).v;
  std::lock_guard lock(g_mu);
  auto it = g_mipmaps.find(mh);
  if (it == g_mipmaps.end()) return CUDA_ERROR_INVALID_HANDLE;
  g_arrays[h] = it->second.shape.level(level);
  it->second.levels.push_back(h);
  *out = reinterpret_cast<CUarray>(h);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray m) {
  GPOOL_TRY
  const uint64_t mh = reinterpret_cast<uint64_t>(m);
  GPOOL_CONN_OF_HANDLE(conn, mh);
  if (int st = conn->call<calls::MipmappedArrayDestroy>(mh)) return static_cast<CUresult>(st);
  std::lock_guard lock(g_mu);
  if (auto it = g_mipmaps.find(mh); it != g_mipmaps.end()) {
    for (uint64_t level : it->second.levels) g_arrays.erase(level);
    g_mipmaps.erase(it);
  }
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// The 1D copies: a byte range of a 1D array.
namespace {

CUresult htoA(CUarray dst, size_t offset, const void* src, size_t bytes, uint64_t stream, bool async) {
  if (!src && bytes) return CUDA_ERROR_INVALID_VALUE;
  return eachRowPiece(raw(dst), offset, bytes, [&](const ArrayRect& r, uint64_t done) {
    return arrays::hostToArray(r, static_cast<const uint8_t*>(src) + done, r.width, stream, async);
  });
}

CUresult atoH(void* dst, CUarray src, size_t offset, size_t bytes, uint64_t stream) {
  if (!dst && bytes) return CUDA_ERROR_INVALID_VALUE;
  return eachRowPiece(raw(src), offset, bytes, [&](const ArrayRect& r, uint64_t done) {
    return arrays::arrayToHost(r, static_cast<uint8_t*>(dst) + done, r.width, stream);
  });
}

CUresult dtoA(CUarray dst, size_t offset, CUdeviceptr src, size_t bytes, uint64_t stream) {
  return eachRowPiece(raw(dst), offset, bytes, [&](const ArrayRect& r, uint64_t done) {
    return arrays::deviceToArray(r, DevRect{src + done, r.width, r.width, 1}, stream, false);
  });
}

CUresult atoD(CUdeviceptr dst, CUarray src, size_t offset, size_t bytes, uint64_t stream) {
  return eachRowPiece(raw(src), offset, bytes, [&](const ArrayRect& r, uint64_t done) {
    return arrays::arrayToDevice(DevRect{dst + done, r.width, r.width, 1}, r, stream, false);
  });
}

// Pieces that lie within one row of each array.
CUresult atoA(CUarray dst, size_t dst_offset, CUarray src, size_t src_offset, size_t bytes, uint64_t stream) {
  ArrayShape d, s;
  if (!arrays::shapeOf(raw(dst), d) || !arrays::shapeOf(raw(src), s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!holds(d, dst_offset, bytes) || !holds(s, src_offset, bytes)) return CUDA_ERROR_INVALID_VALUE;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t to = dst_offset + done, from = src_offset + done;
    const uint64_t n = std::min({bytes - done, d.rowBytes() - to % d.rowBytes(), s.rowBytes() - from % s.rowBytes()});
    if (CUresult st = arrays::arrayToArray(rowPiece(raw(dst), d, to, n), rowPiece(raw(src), s, from, n), stream, false)) return st;
    done += n;
  }
  return CUDA_SUCCESS;
}

}  // namespace

GPOOL_EXPORT CUresult cuMemcpyHtoA_v2(CUarray dst, size_t off, const void* src, size_t n) { GPOOL_TRY return htoA(dst, off, src, n, 0, false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyHtoA_v2_ptds(CUarray dst, size_t off, const void* src, size_t n) { GPOOL_TRY return htoA(dst, off, src, n, streamArg(nullptr, true), false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void* src, size_t n, CUstream s) { GPOOL_TRY return htoA(dst, off, src, n, streamArg(s, false), true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dst, size_t off, const void* src, size_t n, CUstream s) { GPOOL_TRY return htoA(dst, off, src, n, streamArg(s, true), true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyAtoH_v2(void* dst, CUarray src, size_t off, size_t n) { GPOOL_TRY return atoH(dst, src, off, n, 0); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyAtoH_v2_ptds(void* dst, CUarray src, size_t off, size_t n) { GPOOL_TRY return atoH(dst, src, off, n, streamArg(nullptr, true)); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyAtoHAsync_v2(void* dst, CUarray src, size_t off, size_t n, CUstream s) { GPOOL_TRY return atoH(dst, src, off, n, streamArg(s, false)); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyAtoHAsync_v2_ptsz(void* dst, CUarray src, size_t off, size_t n, CUstream s) { GPOOL_TRY return atoH(dst, src, off, n, streamArg(s, true)); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n) { GPOOL_TRY return dtoA(dst, off, src, n, 0); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, size_t off, CUdeviceptr src, size_t n) { GPOOL_TRY return dtoA(dst, off, src, n, streamArg(nullptr, true)); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n) { GPOOL_TRY return atoD(dst, src, off, n, 0); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t off, size_t n) { GPOOL_TRY return atoD(dst, src, off, n, streamArg(nullptr, true)); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) { GPOOL_TRY return atoA(dst, doff, src, soff, n, 0); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpyAtoA_v2_ptds(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) { GPOOL_TRY return atoA(dst, doff, src, soff, n, streamArg(nullptr, true)); GPOOL_CATCH }
