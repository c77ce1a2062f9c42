// The cuda backend's host callbacks: host functions in stream order, captured copies between client
// memory and the device, user objects whose destructors are the client's.
#include "cuda_backend_class.h"

namespace gpool::worker {

CudaBackend::HostFuncArg* CudaBackend::keepHostFunc(uint64_t id) {
  host_funcs_.push_back(HostFuncArg{&callbacks_, id});
  return &host_funcs_.back();
}

void CUDA_CB CudaBackend::hostFunc(void* p) {
  auto* a = static_cast<HostFuncArg*>(p);
  a->callbacks->run(a->id);
}

void CUDA_CB CudaBackend::hostFuncOnce(void* p) {
  std::unique_ptr<HostFuncArg> a(static_cast<HostFuncArg*>(p));
  a->callbacks->run(a->id);
}

Status CudaBackend::LaunchHostFunc(Stream stream, uint64_t id) {
  if (capturing(stream)) {
    return d_.cuLaunchHostFunc_(stream_(stream), &hostFunc, keepHostFunc(id));
  }
  auto arg = std::make_unique<HostFuncArg>(HostFuncArg{&callbacks_, id});
  CUresult r = d_.cuLaunchHostFunc_(stream_(stream), &hostFuncOnce, arg.get());
  if (r == CUDA_SUCCESS) arg.release();  // the callback frees it
  return r;
}

void CUDA_CB CudaBackend::freeHostCopy(void* p) {
  std::unique_ptr<HostCopyArg> a(static_cast<HostCopyArg*>(p));
  std::lock_guard lock(a->blocks->mu);
  if (a->context == a->blocks->context) a->blocks->idle.emplace(a->capacity, a->rows);
}

// A staging buffer of at least `bytes`, idle or new; null when no page-locked memory is left. The
// lock is not held across the driver's call (a destructor may wait for it on a driver thread).
CudaBackend::HostCopyArg* CudaBackend::stagingFor(uint64_t id, size_t bytes) {
  auto a = std::make_unique<HostCopyArg>(HostCopyArg{&callbacks_, id, host_copy_blocks_, 0, nullptr, bytes, 0});
  {
    std::lock_guard lock(host_copy_blocks_->mu);
    a->context = host_copy_blocks_->context;
    if (auto it = host_copy_blocks_->idle.lower_bound(bytes); it != host_copy_blocks_->idle.end()) {
      a->capacity = it->first;
      a->rows = it->second;
      host_copy_blocks_->idle.erase(it);
      return a.release();
    }
  }
  void* p = nullptr;
  a->capacity = std::max<size_t>(bytes, 1);
  if (d_.cuMemHostAlloc_(&p, a->capacity, 0) != CUDA_SUCCESS) return nullptr;
  a->rows = static_cast<uint8_t*>(p);
  return a.release();
}

// Gives `a` to graph `g` (the driver frees it once no graph or instantiation holds it).
CUresult CudaBackend::keepWith(CUgraph g, HostCopyArg* a) {
  CUuserObject obj = nullptr;
  if (CUresult r = d_.cuUserObjectCreate_(&obj, a, &freeHostCopy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC); r != CUDA_SUCCESS) {
    freeHostCopy(a);
    return r;
  }
  CUresult r = g ? d_.cuGraphRetainUserObject_(g, obj, 1, CU_GRAPH_USER_OBJECT_MOVE) : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (r != CUDA_SUCCESS) d_.cuUserObjectRelease_(obj, 1);  // frees `a`
  return r;
}

void CUDA_CB CudaBackend::fetchRows(void* p) {
  auto* a = static_cast<HostCopyArg*>(p);
  a->callbacks->fetch(a->id, a->rows, a->bytes);
}

void CUDA_CB CudaBackend::deliverRows(void* p) {
  auto* a = static_cast<HostCopyArg*>(p);
  a->callbacks->deliver(a->id, a->rows, a->bytes);
}

// Its staging buffer, and the copy between it and the device rows (null: no page-locked memory left).
CudaBackend::HostCopyArg* CudaBackend::hostCopy(uint64_t id, const HostRowsCopy& c, CUDA_MEMCPY3D& p) {
  HostCopyArg* a = stagingFor(id, c.bytes());
  if (!a) return nullptr;
  p = CUDA_MEMCPY3D{};
  p.WidthInBytes = c.device.width;
  p.Height = c.device.height;
  p.Depth = 1;
  if (c.toDevice()) {
    p.srcMemoryType = CU_MEMORYTYPE_HOST;
    p.srcHost = a->rows;
    p.srcPitch = c.device.width;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = c.device.ptr;
    p.dstPitch = c.device.pitch;
  } else {
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = c.device.ptr;
    p.srcPitch = c.device.pitch;
    p.dstMemoryType = CU_MEMORYTYPE_HOST;
    p.dstHost = a->rows;
    p.dstPitch = c.device.width;
  }
  return a;
}

Status CudaBackend::HostCopyCapture(HostRowsCopy c, Stream stream, uint64_t id, uint32_t& captured) {
  captured = 0;
  if (!capturing(stream)) return CUDA_SUCCESS;  // the client copies as usual
  CUDA_MEMCPY3D p;
  HostCopyArg* a = hostCopy(id, c, p);
  if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult kept = keepWith(reinterpret_cast<CUgraph>(captureGraph(stream)), a);
  if (kept != CUDA_SUCCESS) return kept;
  CUstream s = stream_(stream);
  CUresult r = c.toDevice() ? d_.cuLaunchHostFunc_(s, &fetchRows, a) : d_.cuMemcpy3DAsync_(&p, s);
  if (r == CUDA_SUCCESS) r = c.toDevice() ? d_.cuMemcpy3DAsync_(&p, s) : d_.cuLaunchHostFunc_(s, &deliverRows, a);
  captured = r == CUDA_SUCCESS;
  return r;
}

// As a graph node: a child graph of the two (the driver copies it into the node).
Status CudaBackend::GraphAddHostCopyNode(Graph g, GraphNodes deps, HostRowsCopy c, uint64_t id, Created<GraphNode>& out) {
  CUDA_MEMCPY3D p;
  HostCopyArg* a = hostCopy(id, c, p);
  if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult kept = keepWith(graph_(g), a); kept != CUDA_SUCCESS) return kept;
  CUDA_HOST_NODE_PARAMS hp{c.toDevice() ? &fetchRows : &deliverRows, a};
  CUgraph child = nullptr;
  if (CUresult r = d_.cuGraphCreate_(&child, 0); r != CUDA_SUCCESS) return r;
  CUgraphNode first = nullptr, second = nullptr;
  CUresult r = c.toDevice() ? d_.cuGraphAddHostNode_(&first, child, nullptr, 0, &hp)
                            : d_.cuGraphAddMemcpyNode_(&first, child, nullptr, 0, &p, ctx_);
  if (r == CUDA_SUCCESS)
    r = c.toDevice() ? d_.cuGraphAddMemcpyNode_(&second, child, &first, 1, &p, ctx_) : d_.cuGraphAddHostNode_(&second, child, &first, 1, &hp);
  auto d = nodes_(deps);
  Status st = r;
  if (r == CUDA_SUCCESS)
    st = addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddChildGraphNode_(n, graph_(g), d.data(), d.size(), child); });
  d_.cuGraphDestroy_(child);
  return st;
}

// User objects: the destructor is the client's host function `id`, run once when the driver drops the
// last reference (on a thread of the driver's; it only tells the client, and calls no CUDA).
Status CudaBackend::UserObjectCreate(uint64_t id, NewRefs refs, Created<UserObject>& out) {
  auto arg = std::make_unique<HostFuncArg>(HostFuncArg{&callbacks_, id});
  CUuserObject obj = nullptr;
  CUresult r = d_.cuUserObjectCreate_(&obj, arg.get(), &hostFuncOnce, refs.count, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
  if (r == CUDA_SUCCESS) arg.release();  // the destructor frees it
  out = reinterpret_cast<uint64_t>(obj);
  return r;
}

Status CudaBackend::GraphRetainUserObject(Graph g, RefsAdded r) {
  return d_.cuGraphRetainUserObject_(graph_(g), object_(r.obj), r.count, r.move ? CU_GRAPH_USER_OBJECT_MOVE : 0);
}
}  // namespace gpool::worker
