// The cuda backend's device memory: allocations, pools, copies and fills, flat and 2D.
#include "cuda_backend_class.h"

namespace gpool::worker {

Status CudaBackend::MemPoolDestroy(Released<MemPool> p) {
  shareable_.withdraw(ShareableHandles::Object::kPool, p.v);
  return d_.cuMemPoolDestroy_(reinterpret_cast<CUmemoryPool>(p.v));
}

// The shared pool's pages: registered for every context, and mapped for kernels at the address the
// client holds (what CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM promises); where the
// device would see them elsewhere they are refused, and the client keeps the memory to itself.
Status CudaBackend::pinHost(uint64_t ptr, uint64_t bytes) {
  void* h = reinterpret_cast<void*>(ptr);
  CUresult r = d_.cuMemHostRegister_(h, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  if (r != CUDA_SUCCESS) return r;
  CUdeviceptr d = 0;
  if (d_.cuMemHostGetDevicePointer_(&d, h, 0) == CUDA_SUCCESS && d == ptr) return CUDA_SUCCESS;
  d_.cuMemHostUnregister_(h);
  spdlog::warn("host pool: the device maps registered host memory at another address; shared page-locked memory is off");
  return CUDA_ERROR_NOT_SUPPORTED;
}

Status CudaBackend::MemAllocAsync(AllocBytes bytes, Stream stream, NewAlloc& out) {
  CUdeviceptr p = 0;
  CUresult r = d_.cuMemAllocAsync_(&p, bytes, stream_(stream));
  out = NewAlloc{p, bytes};
  return r;
}

Status CudaBackend::MemAllocFromPoolAsync(AllocBytes bytes, MemPool pool, Stream stream, NewAlloc& out) {
  CUdeviceptr p = 0;
  CUresult r = d_.cuMemAllocFromPoolAsync_(&p, bytes, reinterpret_cast<CUmemoryPool>(pool.v), stream_(stream));
  out = NewAlloc{p, bytes};
  return r;
}

Status CudaBackend::MemPoolCreate(uint32_t type, uint32_t handles, uint64_t max_size, uint32_t usage, Created<MemPool>& out) {
  CUmemPoolProps props{};
  props.allocType = static_cast<CUmemAllocationType>(type);
  props.handleTypes = static_cast<CUmemAllocationHandleType>(handles);
  props.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, dev_};  // the worker's device, whatever the client numbered it
  props.maxSize = max_size;
  props.usage = static_cast<unsigned short>(usage);
  CUmemoryPool pool = nullptr;
  CUresult r = d_.cuMemPoolCreate_(&pool, &props);
  out = reinterpret_cast<uint64_t>(pool);
  return r;
}

Status CudaBackend::DeviceGetMemPool(uint32_t which, Created<MemPool>& out) {
  if (which > 1) return CUDA_ERROR_INVALID_VALUE;
  CUmemoryPool pool = nullptr;
  CUresult r = which == 1 ? d_.cuDeviceGetDefaultMemPool_(&pool, dev_) : d_.cuDeviceGetMemPool_(&pool, dev_);
  out = reinterpret_cast<uint64_t>(pool);
  return r;
}

Status CudaBackend::MemPoolSetAttribute(MemPool pool, PoolAttribute a) {
  int i = static_cast<int>(a.value);
  cuuint64_t u = a.value;
  void* v = intPoolAttribute(a.attr) ? static_cast<void*>(&i) : static_cast<void*>(&u);
  return d_.cuMemPoolSetAttribute_(reinterpret_cast<CUmemoryPool>(pool.v), static_cast<CUmemPool_attribute>(a.attr), v);
}

Status CudaBackend::MemPoolGetAttribute(MemPool pool, uint32_t attr, uint64_t& value) {
  if (attr < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || attr > CU_MEMPOOL_ATTR_USED_MEM_HIGH) return CUDA_ERROR_INVALID_VALUE;
  int i = 0;
  cuuint64_t u = 0;
  void* v = intPoolAttribute(attr) ? static_cast<void*>(&i) : static_cast<void*>(&u);
  CUresult r = d_.cuMemPoolGetAttribute_(reinterpret_cast<CUmemoryPool>(pool.v), static_cast<CUmemPool_attribute>(attr), v);
  value = intPoolAttribute(attr) ? static_cast<uint64_t>(i) : u;
  return r;
}

Status CudaBackend::MemAlloc(AllocBytes bytes, NewAlloc& out) {
  CUdeviceptr p = 0;
  CUresult r = d_.cuMemAlloc_(&p, bytes);
  if (r == CUDA_SUCCESS) out = NewAlloc{p, bytes};
  return r;
}

Status CudaBackend::MemGetInfo(MemView& m) {
  size_t f = 0, t = 0;
  CUresult r = d_.cuMemGetInfo_(&f, &t);
  m = MemView{f, t};  // the worker lowers it to the lease's view
  return r;
}

Status CudaBackend::MemcpyHtoD(DevWrite w, Stream stream, uint32_t async) {
  uint64_t dst = w.ptr;
  Blob data = w.data;
  // A captured copy would read the frame buffer at replay, long after it was reused.
  if (capturing(stream)) return refuseInCapture(stream, "a host-to-device copy");
  if (!async) return d_.cuMemcpyHtoD_(dst, data.data, data.size);
  // From a page-locked slot the copy runs asynchronously; the slot's event keeps it from being reused
  // before the copy has read it. (From pageable memory the driver stages the bytes before returning.)
  CUresult r = d_.cuMemcpyHtoDAsync_(dst, data.data, data.size, stream_(stream));
  return r != CUDA_SUCCESS ? r : holdSlot(data, stream);
}

Status CudaBackend::MemAllocPitch(PitchedAlloc a, NewAlloc& out, uint64_t& pitch) {
  CUdeviceptr p = 0;
  size_t chosen = 0;
  CUresult r = d_.cuMemAllocPitch_(&p, &chosen, a.width, a.height, a.elem);
  out = NewAlloc{p, uint64_t{chosen} * a.height};
  pitch = chosen;
  return r;
}

Status CudaBackend::Memset2D(DevFillRect f, uint32_t value, Stream stream, uint32_t async) {
  const DevRect& r = f.dst;
  CUstream s = stream_(stream);
  size_t n = r.width / f.elem;
  switch (f.elem) {
    case 1: return async ? d_.cuMemsetD2D8Async_(r.ptr, r.pitch, static_cast<unsigned char>(value), n, r.height, s) : d_.cuMemsetD2D8_(r.ptr, r.pitch, static_cast<unsigned char>(value), n, r.height);
    case 2: return async ? d_.cuMemsetD2D16Async_(r.ptr, r.pitch, static_cast<unsigned short>(value), n, r.height, s) : d_.cuMemsetD2D16_(r.ptr, r.pitch, static_cast<unsigned short>(value), n, r.height);
    default: return async ? d_.cuMemsetD2D32Async_(r.ptr, r.pitch, value, n, r.height, s) : d_.cuMemsetD2D32_(r.ptr, r.pitch, value, n, r.height);
  }
}

Status CudaBackend::MemcpyHtoD2D(DevWriteRect w, Stream stream, uint32_t async) {
  if (capturing(stream)) return refuseInCapture(stream, "a 2D host-to-device copy");
  CUDA_MEMCPY2D c = copy2D(w.dst.width, w.dst.height);
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = w.data.data;
  c.srcPitch = w.dst.width;
  toDevice(c, w.dst);
  if (!async) return d_.cuMemcpy2D_(&c);
  CUresult r = d_.cuMemcpy2DAsync_(&c, stream_(stream));
  return r != CUDA_SUCCESS ? r : holdSlot(w.data, stream);
}

Status CudaBackend::MemcpyDtoH2D(DevRect src, Stream stream, std::vector<uint8_t>& rows) {
  if (capturing(stream)) return refuseInCapture(stream, "a 2D device-to-host copy");
  rows.resize(src.width * src.height);
  CUDA_MEMCPY2D c = copy2D(src.width, src.height);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src.ptr;
  c.srcPitch = src.pitch;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = rows.data();
  c.dstPitch = src.width;
  CUresult r = d_.cuMemcpy2DAsync_(&c, stream_(stream));
  return r != CUDA_SUCCESS ? r : d_.cuStreamSynchronize_(stream_(stream));
}

Status CudaBackend::MemcpyDtoD2D(DevCopyRect cr, Stream stream, uint32_t async) {
  CUDA_MEMCPY2D c = copy2D(cr.dst.width, cr.dst.height);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = cr.src.ptr;
  c.srcPitch = cr.src.pitch;
  toDevice(c, cr.dst);
  return async ? d_.cuMemcpy2DAsync_(&c, stream_(stream)) : d_.cuMemcpy2D_(&c);
}

Status CudaBackend::MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) {
  if (capturing(stream)) return refuseInCapture(stream, "a device-to-host copy");
  if (stream == 0) return d_.cuMemcpyDtoH_(dst, src, bytes);
  CUresult r = d_.cuMemcpyDtoHAsync_(dst, src, bytes, stream_(stream));
  return r != CUDA_SUCCESS ? r : d_.cuStreamSynchronize_(stream_(stream));
}

Status CudaBackend::MemcpyDtoD(DevCopy c, Stream stream, uint32_t async) {
  // Unified addressing: either end may be the client's page-locked memory in the shared pool.
  return async ? d_.cuMemcpyAsync_(c.dst, c.src, c.bytes, stream_(stream)) : d_.cuMemcpy_(c.dst, c.src, c.bytes);
}

Status CudaBackend::Memset(DevFill f, uint32_t value, Stream stream, uint32_t async) {
  CUstream s = stream_(stream);
  uint64_t dst = f.ptr, count = f.count;
  switch (f.elem) {
    case 1: return async ? d_.cuMemsetD8Async_(dst, static_cast<unsigned char>(value), count, s) : d_.cuMemsetD8_(dst, static_cast<unsigned char>(value), count);
    case 2: return async ? d_.cuMemsetD16Async_(dst, static_cast<unsigned short>(value), count, s) : d_.cuMemsetD16_(dst, static_cast<unsigned short>(value), count);
    default: return async ? d_.cuMemsetD32Async_(dst, value, count, s) : d_.cuMemsetD32_(dst, value, count);
  }
}

CUDA_MEMCPY2D CudaBackend::copy2D(uint64_t width, uint64_t height) {
  CUDA_MEMCPY2D c{};
  c.WidthInBytes = width;
  c.Height = height;
  return c;
}

CUDA_MEMCPY3D CudaBackend::slice(uint64_t width, uint64_t height) {
  CUDA_MEMCPY3D c{};
  c.WidthInBytes = width;
  c.Height = height;
  c.Depth = 1;
  return c;
}

void CudaBackend::toArray(CUDA_MEMCPY3D& c, const ArrayRect& dst) {
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c.dstArray = reinterpret_cast<CUarray>(dst.array.v);
  c.dstXInBytes = dst.x;
  c.dstY = dst.y;
  c.dstZ = dst.z;
}

void CudaBackend::fromArray(CUDA_MEMCPY3D& c, const ArrayRect& src) {
  c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c.srcArray = reinterpret_cast<CUarray>(src.array.v);
  c.srcXInBytes = src.x;
  c.srcY = src.y;
  c.srcZ = src.z;
}

void CudaBackend::toDevice(CUDA_MEMCPY2D& c, const DevRect& dst) {
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst.ptr;
  c.dstPitch = dst.pitch;
}
}  // namespace gpool::worker
