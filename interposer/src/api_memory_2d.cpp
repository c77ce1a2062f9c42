// Pitched memory, 2D/3D copies and 2D memsets. Host rows live on the client: a host-to-device copy sends
// the rows packed, a device-to-host copy receives them packed, and each side applies its own pitch.
// Copies with a CUDA array at either end go to api_array.cpp, one slice's rectangle at a time. Device
// memory is its device's, whichever is current (unified addressing); a rectangle between two devices of a
// lease passes through this process.
#include <cstring>
#include <vector>

#include "state.h"  // first: cuda.h as the library includes it, its versioned names undefined (cuMemcpy3DBatchAsync)
#include "arrays.h"
#include "captured_copies.h"
#include "host_rows.h"
#include "cross_device.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;
using gpool::proto::Blob;
using gpool::proto::DevRect;
using gpool::proto::HostRowsCopy;

namespace {

// One end of a 2D copy (or of one slice of a 3D copy): host or device memory after its X/Y offsets are
// applied, or a CUDA array with its offsets kept (x bytes, row y, slice z).
struct End {
  bool device = false, array = false;
  uint64_t addr = 0, pitch = 0;  // host or device memory
  gpool::proto::ArrayRect rect;  // an array's: where the rectangle starts (width and height are the copy's)
};

// `z`, `height`: the slice of a 3D copy, and the rows per slice of its linear ends.
CUresult resolve(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, size_t pitch, size_t x, size_t y,
                 size_t z, size_t height, End& out) {
  uint64_t offset = (uint64_t{z} * height + y) * pitch + x;
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      out = End{false, false, reinterpret_cast<uint64_t>(host) + offset, pitch, {}};
      return host ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEMORYTYPE_DEVICE:
      out = End{true, false, device + offset, pitch, {}};
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED: {  // the address says which it is
      uint64_t base;
      Allocation a;
      bool dev = State::get().findAllocation(device, base, a) && a.device;
      out = End{dev, false, device + offset, pitch, {}};
      return CUDA_SUCCESS;
    }
    case CU_MEMORYTYPE_ARRAY:
      out = End{false, true, 0, 0, gpool::proto::ArrayRect{reinterpret_cast<uint64_t>(array), x, y, z, 0, 0}};
      return array ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult hostToDevice(const End& src, const End& dst, uint64_t width, uint64_t height, uint64_t stream, bool async) {
  GPOOL_CONN_OF_POINTER(conn, dst.addr);
  if (CUresult r = onMemoryDevice(conn, stream, async)) return r;
  bool captured = false;
  if (CUresult r = captureHostCopy(conn, {HostRowsCopy::kToDevice, {dst.addr, dst.pitch, width, height}}, src.addr, src.pitch, stream, captured); r || captured)
    return r;
  std::vector<uint8_t> packed;
  for (uint64_t y = 0, step = rowsPerMessage(width); y < height; y += step) {
    uint64_t rows = std::min(step, height - y);
    packed.resize(width * rows);
    packRows(packed.data(), reinterpret_cast<const uint8_t*>(src.addr + y * src.pitch), src.pitch, width, rows);
    gpool::proto::DevWriteRect w{DevRect{dst.addr + y * dst.pitch, dst.pitch, width, rows}, Blob{packed.data(), packed.size()}};
    bool last = y + rows == height;
    int st = (last && !async) ? conn->call<calls::MemcpyHtoD2D>(w, stream, 0u) : conn->post<calls::MemcpyHtoD2D>(w, stream, async ? 1u : 0u);
    if (st) return static_cast<CUresult>(st);
  }
  return CUDA_SUCCESS;
}

// Always complete when it returns, as the 1D device-to-host copy.
CUresult deviceToHost(const End& src, const End& dst, uint64_t width, uint64_t height, uint64_t stream) {
  GPOOL_CONN_OF_POINTER(conn, src.addr);
  bool async = false;
  if (CUresult r = onMemoryDevice(conn, stream, async)) return r;
  bool captured = false;
  if (CUresult r = captureHostCopy(conn, {HostRowsCopy::kFromDevice, {src.addr, src.pitch, width, height}}, dst.addr, dst.pitch, stream, captured); r || captured)
    return r;
  for (uint64_t y = 0, step = rowsPerMessage(width); y < height; y += step) {
    uint64_t rows = std::min(step, height - y);
    calls::MemcpyDtoH2D::out::tuple r;
    int st = conn->call<calls::MemcpyDtoH2D>(r, DevRect{src.addr + y * src.pitch, src.pitch, width, rows}, stream);
    if (st) return static_cast<CUresult>(st);
    const std::vector<uint8_t>& packed = std::get<0>(r);
    if (packed.size() != width * rows) return CUDA_ERROR_UNKNOWN;
    unpackRows(reinterpret_cast<uint8_t*>(dst.addr + y * dst.pitch), dst.pitch, packed.data(), width, rows);
  }
  return CUDA_SUCCESS;
}

// A copy with an array at one end or both (api_array.cpp sends it).
CUresult arrayCopy(End src, End dst, uint64_t width, uint64_t height, uint64_t stream, bool async) {
  GPOOL_CONN_OF_HANDLE(conn, (dst.array ? dst : src).rect.array.v);
  if (CUresult r = onMemoryDevice(conn, stream, async)) return r;
  src.rect.width = dst.rect.width = width;
  src.rect.height = dst.rect.height = height;
  if (src.array && dst.array) return arrays::arrayToArray(dst.rect, src.rect, stream, async);
  if (dst.array) {
    if (src.device) return arrays::deviceToArray(dst.rect, DevRect{src.addr, src.pitch, width, height}, stream, async);
    return arrays::hostToArray(dst.rect, reinterpret_cast<const uint8_t*>(src.addr), src.pitch, stream, async);
  }
  if (dst.device) return arrays::arrayToDevice(DevRect{dst.addr, dst.pitch, width, height}, src.rect, stream, async);
  return arrays::arrayToHost(src.rect, reinterpret_cast<uint8_t*>(dst.addr), dst.pitch, stream);
}

// The connection of the device an end's memory is on; -1 for host memory.
int memoryConnection(const End& e) {
  if (e.array) return State::get().connectionOfHandle(e.rect.array.v);
  return e.device ? State::get().connectionOfPointer(e.addr) : -1;
}

CUresult copyRect(const End& src, const End& dst, uint64_t width, uint64_t height, uint64_t stream, bool async);

// The same end `rows` rows further down.
End below(End e, uint64_t rows) {
  if (e.array) e.rect.y += rows;
  else e.addr += rows * e.pitch;
  return e;
}

// Between two devices of a lease: to this process and on, up to 64 MiB at a time, complete when it returns.
CUresult relayRect(const End& src, const End& dst, uint64_t width, uint64_t height, uint64_t stream) {
  const uint64_t step = std::max<uint64_t>(1, (64ull << 20) / width);
  std::vector<uint8_t> rows(width * std::min(step, height));
  const End here{false, false, reinterpret_cast<uint64_t>(rows.data()), width, {}};
  for (uint64_t y = 0; y < height; y += step) {
    uint64_t n = std::min(step, height - y);
    if (CUresult r = copyRect(below(src, y), here, width, n, stream, false)) return r;
    if (CUresult r = copyRect(here, below(dst, y), width, n, stream, false)) return r;
  }
  return CUDA_SUCCESS;
}

// One rectangle: `height` rows of `width` bytes from src to dst.
CUresult copyRect(const End& src, const End& dst, uint64_t width, uint64_t height, uint64_t stream, bool async) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (height > 1 && ((!src.array && width > src.pitch) || (!dst.array && width > dst.pitch))) return CUDA_ERROR_INVALID_VALUE;
  int from = memoryConnection(src), to = memoryConnection(dst);
  if (from >= 0 && to >= 0 && from != to) return relayRect(src, dst, width, height, stream);
  if (src.array || dst.array) return arrayCopy(src, dst, width, height, stream, async);
  if (src.device && dst.device) {
    GPOOL_CONN_OF_POINTER(conn, dst.addr);
    if (CUresult r = onMemoryDevice(conn, stream, async)) return r;
    gpool::proto::DevCopyRect rect{DevRect{dst.addr, dst.pitch, width, height}, DevRect{src.addr, src.pitch, width, height}};
    return static_cast<CUresult>(async ? conn->post<calls::MemcpyDtoD2D>(rect, stream, 1u) : conn->call<calls::MemcpyDtoD2D>(rect, stream, 0u));
  }
  if (dst.device) return hostToDevice(src, dst, width, height, stream, async);
  if (src.device) return deviceToHost(src, dst, width, height, stream);
  for (uint64_t y = 0; y < height; ++y)
    std::memmove(reinterpret_cast<void*>(dst.addr + y * dst.pitch), reinterpret_cast<const void*>(src.addr + y * src.pitch), width);
  return CUDA_SUCCESS;
}

CUresult copy2D(const CUDA_MEMCPY2D* c, uint64_t stream, bool async) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (c->WidthInBytes == 0 || c->Height == 0) return CUDA_SUCCESS;
  End src, dst;
  if (CUresult r = resolve(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcPitch, c->srcXInBytes, c->srcY, 0, 0, src)) return r;
  if (CUresult r = resolve(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstPitch, c->dstXInBytes, c->dstY, 0, 0, dst)) return r;
  return copyRect(src, dst, c->WidthInBytes, c->Height, stream, async);
}

// A 3D copy is Depth rectangles: slice z of a linear end starts (srcZ + z) * srcHeight rows in; an array
// end names its slice.
CUresult copy3D(const CUDA_MEMCPY3D* c, uint64_t stream, bool async) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (c->srcLOD || c->dstLOD) return CUDA_ERROR_INVALID_VALUE;
  for (size_t z = 0; z < c->Depth; ++z) {
    End src, dst;
    if (CUresult r = resolve(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcPitch, c->srcXInBytes, c->srcY,
                             c->srcZ + z, c->srcHeight, src))
      return r;
    if (CUresult r = resolve(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstPitch, c->dstXInBytes, c->dstY,
                             c->dstZ + z, c->dstHeight, dst))
      return r;
    if (CUresult r = copyRect(src, dst, c->WidthInBytes, c->Height, stream, async)) return r;
  }
  return CUDA_SUCCESS;
}

// A 3D peer copy names each end's context; under unified addressing the memory already says its device
// (a lease's devices are separate workers; copyRect relays between them), so the contexts are only checked.
CUresult copy3DPeer(const CUDA_MEMCPY3D_PEER* p, uint64_t stream, bool async) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  auto contextOk = [](CUmemorytype type, CUcontext ctx) { return type != CU_MEMORYTYPE_DEVICE || State::get().isContext(ctx); };
  if (!contextOk(p->srcMemoryType, p->srcContext) || !contextOk(p->dstMemoryType, p->dstContext)) return CUDA_ERROR_INVALID_CONTEXT;
  CUDA_MEMCPY3D c{};
  c.srcXInBytes = p->srcXInBytes, c.srcY = p->srcY, c.srcZ = p->srcZ, c.srcLOD = p->srcLOD;
  c.srcMemoryType = p->srcMemoryType, c.srcHost = p->srcHost, c.srcDevice = p->srcDevice, c.srcArray = p->srcArray;
  c.srcPitch = p->srcPitch, c.srcHeight = p->srcHeight;
  c.dstXInBytes = p->dstXInBytes, c.dstY = p->dstY, c.dstZ = p->dstZ, c.dstLOD = p->dstLOD;
  c.dstMemoryType = p->dstMemoryType, c.dstHost = p->dstHost, c.dstDevice = p->dstDevice, c.dstArray = p->dstArray;
  c.dstPitch = p->dstPitch, c.dstHeight = p->dstHeight;
  c.WidthInBytes = p->WidthInBytes, c.Height = p->Height, c.Depth = p->Depth;
  return copy3D(&c, stream, async);
}

// Batched 3D copies (cuMemcpy3DBatchAsync): each operation is a 3D copy in stream order. Extents and
// offsets count elements: an array's (both arrays' alike), else bytes.
CUresult elementBytes(const CUmemcpy3DOperand& o, uint64_t& bytes) {
  if (o.type == CU_MEMCPY_OPERAND_TYPE_POINTER) return CUDA_SUCCESS;
  gpool::proto::ArrayShape shape;
  if (o.type != CU_MEMCPY_OPERAND_TYPE_ARRAY || !arrays::shapeOf(reinterpret_cast<uint64_t>(o.op.array.array), shape))
    return CUDA_ERROR_INVALID_VALUE;
  if (bytes && bytes != shape.elementBytes()) return CUDA_ERROR_INVALID_VALUE;  // two arrays of different elements
  bytes = shape.elementBytes();
  return CUDA_SUCCESS;
}

// One operand as an end of a CUDA_MEMCPY3D: a pointer is host or device memory as its address says.
CUresult batchEnd(const CUmemcpy3DOperand& o, const CUextent3D& e, uint64_t elem, CUmemorytype& type, CUdeviceptr& ptr,
                  CUarray& array, size_t& x, size_t& y, size_t& z, size_t& pitch, size_t& height) {
  if (o.type == CU_MEMCPY_OPERAND_TYPE_ARRAY) {
    type = CU_MEMORYTYPE_ARRAY;
    array = o.op.array.array;
    x = o.op.array.offset.x * elem;
    y = o.op.array.offset.y;
    z = o.op.array.offset.z;
    return CUDA_SUCCESS;
  }
  if ((o.op.ptr.rowLength && o.op.ptr.rowLength < e.width) || (o.op.ptr.layerHeight && o.op.ptr.layerHeight < e.height))
    return CUDA_ERROR_INVALID_VALUE;
  type = CU_MEMORYTYPE_UNIFIED;
  ptr = o.op.ptr.ptr;
  pitch = (o.op.ptr.rowLength ? o.op.ptr.rowLength : e.width) * elem;
  height = o.op.ptr.layerHeight ? o.op.ptr.layerHeight : e.height;
  return CUDA_SUCCESS;
}

CUresult batchOp(const CUDA_MEMCPY3D_BATCH_OP& op, uint64_t stream) {
  const CUextent3D& e = op.extent;
  if (!e.width || !e.height || !e.depth || op.srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
      op.srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t elem = 0;
  if (CUresult r = elementBytes(op.src, elem)) return r;
  if (CUresult r = elementBytes(op.dst, elem)) return r;
  if (!elem) elem = 1;
  if (e.width > SIZE_MAX / elem) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D c{};
  if (CUresult r = batchEnd(op.src, e, elem, c.srcMemoryType, c.srcDevice, c.srcArray, c.srcXInBytes, c.srcY, c.srcZ,
                            c.srcPitch, c.srcHeight))
    return r;
  if (CUresult r = batchEnd(op.dst, e, elem, c.dstMemoryType, c.dstDevice, c.dstArray, c.dstXInBytes, c.dstY, c.dstZ,
                            c.dstPitch, c.dstHeight))
    return r;
  c.WidthInBytes = e.width * elem;
  c.Height = e.height;
  c.Depth = e.depth;
  return copy3D(&c, stream, true);
}

// The batch in order (CUDA promises no order within a batch, so this is one of the allowed ones); a host
// source is read before this returns, as CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL requires.
CUresult copy3DBatch(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail, unsigned long long flags, uint64_t stream) {
  if (fail) *fail = SIZE_MAX;
  if (!n || !ops || flags != 0 || stream == 0) return CUDA_ERROR_INVALID_VALUE;  // not the legacy stream, as CUDA
  for (size_t i = 0; i < n; ++i) {
    if (CUresult r = batchOp(ops[i], stream)) {
      if (fail) *fail = i;
      return r;
    }
  }
  return CUDA_SUCCESS;
}

CUresult memset2D(CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t elem, size_t width, size_t height, uint64_t stream, bool async) {
  GPOOL_CONN_OF_POINTER(conn, dst);
  if (CUresult r = onMemoryDevice(conn, stream, async)) return r;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (width > SIZE_MAX / elem) return CUDA_ERROR_INVALID_VALUE;
  gpool::proto::DevFillRect f{DevRect{dst, pitch, uint64_t{width} * elem, height}, elem};
  return static_cast<CUresult>(async ? conn->post<calls::Memset2D>(f, value, stream, 1u) : conn->call<calls::Memset2D>(f, value, stream, 0u));
}

}  // namespace

GPOOL_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned int elem) {
  GPOOL_TRY
  if (!dptr || !pitch) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  uint64_t p = 0, bytes = 0, chosen = 0;
  auto allocate = [&](uint64_t& ptr, uint64_t& size) {
    calls::MemAllocPitch::out::tuple r;
    int st = conn->call<calls::MemAllocPitch>(r, gpool::proto::PitchedAlloc{width, height, elem});
    ptr = std::get<0>(r).ptr;
    size = std::get<0>(r).bytes;
    chosen = std::get<1>(r);
    return static_cast<CUresult>(st);
  };
  CUresult st = allocateApart(conn, allocate, [&](uint64_t ptr) { conn->post<calls::MemFree>(ptr); }, p, bytes);
  if (st) return st;
  *dptr = p;
  *pitch = chosen;
  State::get().addAllocation(p, bytes, true);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// 2D and 3D copies; the _ptds/_ptsz variants differ only in what stream 0 means.
GPOOL_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* c) { GPOOL_TRY return copy2D(c, 0, false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* c) { GPOOL_TRY return copy2D(c, streamArg(nullptr, true), false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* c) { GPOOL_TRY return copy2D(c, 0, false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* c) { GPOOL_TRY return copy2D(c, streamArg(nullptr, true), false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* c, CUstream s) { GPOOL_TRY return copy2D(c, streamArg(s, false), true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* c, CUstream s) { GPOOL_TRY return copy2D(c, streamArg(s, true), true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* c) { GPOOL_TRY return copy3D(c, 0, false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* c) { GPOOL_TRY return copy3D(c, streamArg(nullptr, true), false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* c, CUstream s) { GPOOL_TRY return copy3D(c, streamArg(s, false), true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* c, CUstream s) { GPOOL_TRY return copy3D(c, streamArg(s, true), true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* p) { GPOOL_TRY return copy3DPeer(p, 0, false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* p) { GPOOL_TRY return copy3DPeer(p, streamArg(nullptr, true), false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* p, CUstream s) { GPOOL_TRY return copy3DPeer(p, streamArg(s, false), true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* p, CUstream s) { GPOOL_TRY return copy3DPeer(p, streamArg(s, true), true); GPOOL_CATCH }
// CUDA 12.8's batch names the failing operation; CUDA 13's (_v2) does not.
GPOOL_EXPORT CUresult cuMemcpy3DBatchAsync(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail, unsigned long long flags, CUstream s) {
  GPOOL_TRY return copy3DBatch(n, ops, fail, flags, streamArg(s, false)); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpy3DBatchAsync_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail, unsigned long long flags, CUstream s) {
  GPOOL_TRY return copy3DBatch(n, ops, fail, flags, streamArg(s, true)); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpy3DBatchAsync_v2(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags, CUstream s) {
  GPOOL_TRY return copy3DBatch(n, ops, nullptr, flags, streamArg(s, false)); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags, CUstream s) {
  GPOOL_TRY return copy3DBatch(n, ops, nullptr, flags, streamArg(s, true)); GPOOL_CATCH
}

// 2D memsets: D2D8/16/32, synchronous and asynchronous, each with its per-thread variant.
#define GPOOL_MEMSET2D(bits, type)                                                                                 \
  GPOOL_EXPORT CUresult cuMemsetD2D##bits##_v2(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h) {          \
    GPOOL_TRY return memset2D(d, pitch, v, bits / 8, w, h, 0, false); GPOOL_CATCH                                   \
  }                                                                                                              \
  GPOOL_EXPORT CUresult cuMemsetD2D##bits##_v2_ptds(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h) {     \
    GPOOL_TRY return memset2D(d, pitch, v, bits / 8, w, h, streamArg(nullptr, true), false); GPOOL_CATCH            \
  }                                                                                                              \
  GPOOL_EXPORT CUresult cuMemsetD2D##bits##Async(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h, CUstream s) { \
    GPOOL_TRY return memset2D(d, pitch, v, bits / 8, w, h, streamArg(s, false), true); GPOOL_CATCH                  \
  }                                                                                                              \
  GPOOL_EXPORT CUresult cuMemsetD2D##bits##Async_ptsz(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h, CUstream s) { \
    GPOOL_TRY return memset2D(d, pitch, v, bits / 8, w, h, streamArg(s, true), true); GPOOL_CATCH                   \
  }
GPOOL_MEMSET2D(8, unsigned char)
GPOOL_MEMSET2D(16, unsigned short)
GPOOL_MEMSET2D(32, unsigned int)
