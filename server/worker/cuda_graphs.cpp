// The cuda backend's graphs: explicit construction, node parameters, graph memory, topology.
#include "cuda_backend_class.h"

namespace gpool::worker {

std::vector<CUgraphNode> CudaBackend::nodes_(const GraphNodes& n) {
  std::vector<CUgraphNode> out;
  for (uint64_t v : n.v) out.push_back(reinterpret_cast<CUgraphNode>(v));
  return out;
}

// A kernel node's parameters; its argument pointers stay valid until the next call.
CUresult CudaBackend::kernelParams(const KernelCall& c, CUDA_KERNEL_NODE_PARAMS& p) {
  const std::vector<uint32_t>* layout = nullptr;
  if (CUresult r = paramLayout(c.f, layout); r != CUDA_SUCCESS) return r;
  args_.clear();
  const auto* base = static_cast<const uint8_t*>(c.params.data);
  for (size_t i = 0; i + 1 < layout->size(); i += 2) {
    if (uint64_t{(*layout)[i]} + (*layout)[i + 1] > c.params.size) return CUDA_ERROR_INVALID_VALUE;
    args_.push_back(const_cast<uint8_t*>(base + (*layout)[i]));
  }
  p = CUDA_KERNEL_NODE_PARAMS{};
  if (CUresult r = function(c.f, p.func); r != CUDA_SUCCESS) return r;
  p.gridDimX = c.gx; p.gridDimY = c.gy; p.gridDimZ = c.gz;
  p.blockDimX = c.bx; p.blockDimY = c.by; p.blockDimZ = c.bz;
  p.sharedMemBytes = c.shared;
  p.kernelParams = args_.data();
  return CUDA_SUCCESS;
}

Status CudaBackend::GraphCreate(uint32_t flags, Created<Graph>& out) {
  CUgraph g = nullptr;
  CUresult r = d_.cuGraphCreate_(&g, flags);
  out = reinterpret_cast<uint64_t>(g);
  return r;
}

Status CudaBackend::GraphAddEmptyNode(Graph g, GraphNodes deps, Created<GraphNode>& out) {
  auto d = nodes_(deps);
  return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddEmptyNode_(n, graph_(g), d.data(), d.size()); });
}

Status CudaBackend::GraphAddKernelNode(Graph g, GraphNodes deps, KernelCall call, Created<GraphNode>& out) {
  CUDA_KERNEL_NODE_PARAMS p;
  if (CUresult r = kernelParams(call, p); r != CUDA_SUCCESS) return r;
  auto d = nodes_(deps);
  return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddKernelNode_(n, graph_(g), d.data(), d.size(), &p); });
}

CUDA_MEMSET_NODE_PARAMS CudaBackend::memsetParams(const DevFillRect& f, uint32_t value) {
  return CUDA_MEMSET_NODE_PARAMS{f.dst.ptr, f.dst.pitch, value, f.elem, f.dst.width / f.elem, f.dst.height};
}

CUDA_MEMCPY3D CudaBackend::memcpyParams(const DevCopyRect& c) {
  CUDA_MEMCPY3D p{};
  p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = c.src.ptr;
  p.srcPitch = c.src.pitch;
  p.dstDevice = c.dst.ptr;
  p.dstPitch = c.dst.pitch;
  p.WidthInBytes = c.dst.width;
  p.Height = c.dst.height;
  p.Depth = 1;
  return p;
}

Status CudaBackend::GraphAddMemsetNode(Graph g, GraphNodes deps, DevFillRect f, uint32_t value, Created<GraphNode>& out) {
  CUDA_MEMSET_NODE_PARAMS p = memsetParams(f, value);
  auto d = nodes_(deps);
  return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddMemsetNode_(n, graph_(g), d.data(), d.size(), &p, ctx_); });
}

Status CudaBackend::GraphAddMemcpyNode(Graph g, GraphNodes deps, DevCopyRect c, Created<GraphNode>& out) {
  CUDA_MEMCPY3D p = memcpyParams(c);
  auto d = nodes_(deps);
  return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddMemcpyNode_(n, graph_(g), d.data(), d.size(), &p, ctx_); });
}

// Graph memory (graph_memory.h): allocation nodes on the worker's device, readable and writable there.
Status CudaBackend::GraphAddMemAllocNode(Graph g, GraphNodes deps, GraphAllocBytes bytes, Created<GraphNode>& out, GraphAlloc& made) {
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, dev_};
  p.bytesize = bytes.bytes;
  auto d = nodes_(deps);
  Status r = addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddMemAllocNode_(n, graph_(g), d.data(), d.size(), &p); });
  made = GraphAlloc{p.dptr, bytes.bytes};
  return r;
}

Status CudaBackend::GraphAddMemFreeNode(Graph g, GraphNodes deps, GraphFreed ptr, Created<GraphNode>& out) {
  auto d = nodes_(deps);
  return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddMemFreeNode_(n, graph_(g), d.data(), d.size(), ptr.ptr); });
}

Status CudaBackend::GraphMemNodeGetParams(Graph, GraphNode node, uint64_t& ptr, uint64_t& bytes) {
  CUgraphNodeType type;
  if (CUresult r = d_.cuGraphNodeGetType_(node_(node.v), &type); r != CUDA_SUCCESS) return r;
  bytes = 0;
  if (type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
    CUdeviceptr p = 0;
    CUresult r = d_.cuGraphMemFreeNodeGetParams_(node_(node.v), &p);
    ptr = p;
    return r;
  }
  if (type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  CUresult r = d_.cuGraphMemAllocNodeGetParams_(node_(node.v), &p);
  ptr = p.dptr, bytes = p.bytesize;
  return r;
}

Status CudaBackend::DeviceGraphMemGet(std::vector<uint64_t>& figures) {
  figures.assign(4, 0);
  for (int i = 0; i < 4; ++i) {
    cuuint64_t v = 0;
    auto attr = static_cast<CUgraphMem_attribute>(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT + i);
    if (CUresult r = d_.cuDeviceGetGraphMemAttribute_(dev_, attr, &v); r != CUDA_SUCCESS) return r;
    figures[static_cast<size_t>(i)] = v;
  }
  return CUDA_SUCCESS;
}

Status CudaBackend::DeviceGraphMemResetHigh(uint32_t attr) {
  if (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t zero = 0;
  return d_.cuDeviceSetGraphMemAttribute_(dev_, static_cast<CUgraphMem_attribute>(attr), &zero);
}

uint64_t CudaBackend::captureGraph(uint64_t stream) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph g = nullptr;
  if (d_.cuStreamGetCaptureInfo_(stream_(stream), &st, nullptr, &g, nullptr, nullptr, nullptr) != CUDA_SUCCESS) return 0;
  return st != CU_STREAM_CAPTURE_STATUS_NONE ? reinterpret_cast<uint64_t>(g) : 0;  // invalidated: until it ends
}

void CudaBackend::graphMemory(uint64_t& used, uint64_t& reserved) {
  cuuint64_t u = 0, r = 0;
  d_.cuDeviceGetGraphMemAttribute_(dev_, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &u);
  d_.cuDeviceGetGraphMemAttribute_(dev_, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &r);
  used = u, reserved = r;
}

Status CudaBackend::GraphAddHostNode(Graph g, GraphNodes deps, uint64_t id, Created<GraphNode>& out) {
  CUDA_HOST_NODE_PARAMS p{&hostFunc, keepHostFunc(id)};
  auto d = nodes_(deps);
  return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddHostNode_(n, graph_(g), d.data(), d.size(), &p); });
}

Status CudaBackend::GraphAddEventNode(Graph g, GraphNodes deps, Event e, uint32_t wait, Created<GraphNode>& out) {
  auto d = nodes_(deps);
  return addNode(out, [&](CUgraphNode* n) {
    return wait ? d_.cuGraphAddEventWaitNode_(n, graph_(g), d.data(), d.size(), event_(e))
                : d_.cuGraphAddEventRecordNode_(n, graph_(g), d.data(), d.size(), event_(e));
  });
}

Status CudaBackend::GraphAddChildGraphNode(Graph g, GraphNodes deps, ChildGraph child, Created<GraphNode>& out) {
  auto d = nodes_(deps);
  return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddChildGraphNode_(n, graph_(g), d.data(), d.size(), graph_(child.v)); });
}

Status CudaBackend::GraphAddDependencies(Graph g, GraphEdges e) {
  auto f = nodes_(e.from), t = nodes_(e.to);
  return d_.cuGraphAddDependencies_(graph_(g), f.data(), t.data(), nullptr, f.size());
}

Status CudaBackend::GraphKernelNodeSetParams(Graph, GraphNode node, KernelCall call) {
  CUDA_KERNEL_NODE_PARAMS p;
  if (CUresult r = kernelParams(call, p); r != CUDA_SUCCESS) return r;
  return d_.cuGraphKernelNodeSetParams_(reinterpret_cast<CUgraphNode>(node.v), &p);
}

Status CudaBackend::GraphExecKernelNodeSetParams(GraphExec exec, Graph, GraphNode node, KernelCall call) {
  CUDA_KERNEL_NODE_PARAMS p;
  if (CUresult r = kernelParams(call, p); r != CUDA_SUCCESS) return r;
  return d_.cuGraphExecKernelNodeSetParams_(reinterpret_cast<CUgraphExec>(exec.v), reinterpret_cast<CUgraphNode>(node.v), &p);
}

CudaBackend::BatchMemOps CudaBackend::batchMemOps(const MemOps& m) {
  BatchMemOps b;
  b.ops.resize(m.count());
  for (size_t i = 0; i < m.count(); ++i) {
    CUstreamBatchMemOpParams& o = b.ops[i];
    o.operation = static_cast<CUstreamBatchMemOpType>(m.op(i));
    if (m.bytes(i) == 0) {
      o.flushRemoteWrites.flags = m.flags(i);  // a barrier's flags sit at the same place
      continue;
    }
    auto fill = [&](auto& w) {
      w.address = m.ptr(i);
      w.value64 = m.value(i);
      w.flags = m.flags(i);
    };
    if (m.op(i) == MemOps::kWait32 || m.op(i) == MemOps::kWait64) fill(o.waitValue);
    else fill(o.writeValue);
  }
  b.params = CUDA_BATCH_MEM_OP_NODE_PARAMS{ctx_, static_cast<unsigned>(b.ops.size()), b.ops.data(), 0};
  return b;
}

Status CudaBackend::GraphAddBatchMemOpNode(Graph g, GraphNodes deps, MemOps m, Created<GraphNode>& out) {
  BatchMemOps b = batchMemOps(m);
  auto d = nodes_(deps);
  return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddBatchMemOpNode_(n, graph_(g), d.data(), d.size(), &b.params); });
}

Status CudaBackend::GraphBatchMemOpNodeSetParams(Graph, GraphNode node, MemOps m) {
  BatchMemOps b = batchMemOps(m);
  return d_.cuGraphBatchMemOpNodeSetParams_(node_(node.v), &b.params);
}

Status CudaBackend::GraphExecBatchMemOpNodeSetParams(GraphExec exec, Graph, GraphNode node, MemOps m) {
  BatchMemOps b = batchMemOps(m);
  return d_.cuGraphExecBatchMemOpNodeSetParams_(exec_(exec.v), node_(node.v), &b.params);
}

Status CudaBackend::GraphExecMemsetNodeSetParams(GraphExec exec, Graph, GraphNode node, DevFillRect f, uint32_t value) {
  CUDA_MEMSET_NODE_PARAMS p = memsetParams(f, value);
  return d_.cuGraphExecMemsetNodeSetParams_(exec_(exec.v), node_(node.v), &p, ctx_);
}

Status CudaBackend::GraphExecMemcpyNodeSetParams(GraphExec exec, Graph, GraphNode node, DevCopyRect c) {
  CUDA_MEMCPY3D p = memcpyParams(c);
  return d_.cuGraphExecMemcpyNodeSetParams_(exec_(exec.v), node_(node.v), &p, ctx_);
}

Status CudaBackend::GraphExecHostNodeSetParams(GraphExec exec, Graph, GraphNode node, uint64_t id) {
  CUDA_HOST_NODE_PARAMS p{&hostFunc, keepHostFunc(id)};
  return d_.cuGraphExecHostNodeSetParams_(exec_(exec.v), node_(node.v), &p);
}

Status CudaBackend::GraphExecUpdate(GraphExec exec, Graph g, uint32_t& result) {
  CUgraphExecUpdateResultInfo info{};
  CUresult r = d_.cuGraphExecUpdate_(reinterpret_cast<CUgraphExec>(exec.v), graph_(g), &info);
  result = info.result;
  return r;
}

Status CudaBackend::GraphConditionalHandleCreate(Graph g, uint32_t initial, uint32_t flags, Created<Conditional>& out) {
  CUgraphConditionalHandle h = 0;
  CUresult r = d_.cuGraphConditionalHandleCreate_(&h, graph_(g), ctx_, initial, flags);
  out = h;
  return r;
}

Status CudaBackend::GraphAddConditionalNode(Graph g, GraphNodes deps, Conditional c, uint32_t type, uint32_t size,
                               Created<GraphNode>& out, Created<BodyGraphs>& bodies) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional = CUDA_CONDITIONAL_NODE_PARAMS{c.v, static_cast<CUgraphConditionalNodeType>(type), size, nullptr, ctx_};
  auto d = nodes_(deps);
  Status r = addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddNode_(n, graph_(g), d.data(), nullptr, d.size(), &p); });
  for (uint32_t i = 0; r == CUDA_SUCCESS && i < size; ++i) bodies.v.push_back(reinterpret_cast<uint64_t>(p.conditional.phGraph_out[i]));
  return r;
}

Status CudaBackend::GraphTopology(Graph g, Created<GraphNodes>& nodes, std::vector<uint32_t>& types, std::vector<uint64_t>& edges) {
  size_t count = 0, edge_count = 0;
  if (CUresult r = d_.cuGraphGetNodes_(graph_(g), nullptr, &count); r != CUDA_SUCCESS) return r;
  std::vector<CUgraphNode> all(count);
  if (CUresult r = d_.cuGraphGetNodes_(graph_(g), all.data(), &count); r != CUDA_SUCCESS) return r;
  for (CUgraphNode n : all) {
    CUgraphNodeType type{};
    if (CUresult r = d_.cuGraphNodeGetType_(n, &type); r != CUDA_SUCCESS) return r;
    nodes.v.push_back(reinterpret_cast<uint64_t>(n));
    types.push_back(type);
  }
  if (CUresult r = d_.cuGraphGetEdges_(graph_(g), nullptr, nullptr, nullptr, &edge_count); r != CUDA_SUCCESS) return r;
  std::vector<CUgraphNode> from(edge_count), to(edge_count);
  if (CUresult r = d_.cuGraphGetEdges_(graph_(g), from.data(), to.data(), nullptr, &edge_count); r != CUDA_SUCCESS) return r;
  for (size_t i = 0; i < edge_count; ++i) {
    edges.push_back(reinterpret_cast<uint64_t>(from[i]));
    edges.push_back(reinterpret_cast<uint64_t>(to[i]));
  }
  return CUDA_SUCCESS;
}

Status CudaBackend::GraphKernelNodeSetAttribute(Graph, GraphNode node, LaunchAttrs attr) {
  if (attr.data.size != sizeof(CUlaunchAttribute)) return CUDA_ERROR_INVALID_VALUE;
  CUlaunchAttribute a;
  std::memcpy(&a, attr.data.data, sizeof a);
  return d_.cuGraphKernelNodeSetAttribute_(node_(node.v), a.id, &a.value);
}

Status CudaBackend::GraphKernelNodeGetAttribute(Graph, GraphNode node, uint32_t id, std::vector<uint8_t>& value) {
  CUlaunchAttributeValue v{};
  CUresult r = d_.cuGraphKernelNodeGetAttribute_(node_(node.v), static_cast<CUlaunchAttributeID>(id), &v);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&v);
  if (r == CUDA_SUCCESS) value.assign(bytes, bytes + sizeof v);
  return r;
}

// A captured node's parameters, for a client that reads them back. A kernel node names the handle the
// client launched with: the CUkernel whose function the worker launched, when it launched one.
Status CudaBackend::GraphKernelNodeGetParams(Graph, GraphNode node, Launchable& f, uint32_t& is_kernel, std::vector<uint32_t>& shape,
                                std::vector<uint8_t>& args) {
  CUDA_KERNEL_NODE_PARAMS p{};
  if (CUresult r = d_.cuGraphKernelNodeGetParams_(node_(node.v), &p); r != CUDA_SUCCESS) return r;
  f = launchableOf(p);
  is_kernel = f.is_kernel;
  const std::vector<uint32_t>* layout = nullptr;
  if (CUresult r = paramLayout(f, layout); r != CUDA_SUCCESS) return r;
  if (!layout->empty() && !p.kernelParams) return CUDA_ERROR_NOT_SUPPORTED;  // the worker launches with kernelParams alone
  args.assign(layout->empty() ? 0 : (*layout)[layout->size() - 2] + layout->back(), 0);
  for (size_t i = 0; i + 1 < layout->size(); i += 2) std::memcpy(args.data() + (*layout)[i], p.kernelParams[i / 2], (*layout)[i + 1]);
  shape = {p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ, p.sharedMemBytes};
  return CUDA_SUCCESS;
}

Status CudaBackend::GraphMemsetNodeGetParams(Graph, GraphNode node, DevFillRect& f, uint32_t& value) {
  CUDA_MEMSET_NODE_PARAMS p{};
  if (CUresult r = d_.cuGraphMemsetNodeGetParams_(node_(node.v), &p); r != CUDA_SUCCESS) return r;
  uint64_t width = uint64_t{p.width} * p.elementSize;
  f = DevFillRect{DevRect{p.dst, p.height > 1 ? p.pitch : width, width, p.height}, p.elementSize};
  value = p.value;
  return CUDA_SUCCESS;
}

// Only a copy between device memory: the worker's captured host copies go through its own staging memory,
// and page-locked memory it shares with a client on its host is host memory too. A unified end (as the
// driver may record a captured cuMemcpyDtoDAsync's) is device memory when the driver says so.
bool CudaBackend::deviceEnd(CUmemorytype t, CUdeviceptr ptr) {
  if (t != CU_MEMORYTYPE_UNIFIED) return t == CU_MEMORYTYPE_DEVICE;
  unsigned type = 0;
  return d_.cuPointerGetAttribute_(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) == CUDA_SUCCESS && type == CU_MEMORYTYPE_DEVICE;
}

Status CudaBackend::GraphMemcpyNodeGetParams(Graph, GraphNode node, DevCopyRect& c) {
  CUDA_MEMCPY3D p{};
  if (CUresult r = d_.cuGraphMemcpyNodeGetParams_(node_(node.v), &p); r != CUDA_SUCCESS) return r;
  if (!deviceEnd(p.srcMemoryType, p.srcDevice) || !deviceEnd(p.dstMemoryType, p.dstDevice) || p.Depth > 1 || p.srcZ || p.dstZ)
    return CUDA_ERROR_NOT_SUPPORTED;
  uint64_t height = p.Height ? p.Height : 1;
  c.dst = DevRect{p.dstDevice + p.dstY * p.dstPitch + p.dstXInBytes, p.dstPitch ? p.dstPitch : p.WidthInBytes, p.WidthInBytes, height};
  c.src = DevRect{p.srcDevice + p.srcY * p.srcPitch + p.srcXInBytes, p.srcPitch ? p.srcPitch : p.WidthInBytes, p.WidthInBytes, height};
  return CUDA_SUCCESS;
}

Status CudaBackend::GraphEventNodeGetEvent(Graph, GraphNode node, uint32_t wait, Event& out) {
  CUevent e = nullptr;
  CUresult r = wait ? d_.cuGraphEventWaitNodeGetEvent_(node_(node.v), &e) : d_.cuGraphEventRecordNodeGetEvent_(node_(node.v), &e);
  out = reinterpret_cast<uint64_t>(e);
  return r;
}

// The worker's own host nodes (a captured host copy's fetch or delivery) name no function of the client's.
Status CudaBackend::GraphHostNodeGetParams(Graph, GraphNode node, uint64_t& id) {
  CUDA_HOST_NODE_PARAMS p{};
  if (CUresult r = d_.cuGraphHostNodeGetParams_(node_(node.v), &p); r != CUDA_SUCCESS) return r;
  if (p.fn != &hostFunc || !p.userData) return CUDA_ERROR_NOT_SUPPORTED;
  id = static_cast<const HostFuncArg*>(p.userData)->id;
  return CUDA_SUCCESS;
}

Status CudaBackend::StreamSetAttribute(Stream stream, LaunchAttrs attr) {
  if (attr.data.size != sizeof(CUlaunchAttribute)) return CUDA_ERROR_INVALID_VALUE;
  CUlaunchAttribute a;
  std::memcpy(&a, attr.data.data, sizeof a);
  return d_.cuStreamSetAttribute_(stream_(stream), a.id, &a.value);
}

Status CudaBackend::StreamGetAttribute(Stream stream, uint32_t id, std::vector<uint8_t>& value) {
  CUlaunchAttributeValue v{};
  CUresult r = d_.cuStreamGetAttribute_(stream_(stream), static_cast<CUstreamAttrID>(id), &v);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&v);
  if (r == CUDA_SUCCESS) value.assign(bytes, bytes + sizeof v);
  return r;
}

Status CudaBackend::GraphKernelNodeCopyAttributes(Graph, GraphNode dst, Graph, GraphNode src) {
  return d_.cuGraphKernelNodeCopyAttributes_(node_(dst.v), node_(src.v));
}

Status CudaBackend::GraphChildGraphNodeGetGraph(Graph, GraphNode node, Created<BodyGraphs>& graph) {
  CUgraph child = nullptr;
  CUresult r = d_.cuGraphChildGraphNodeGetGraph_(node_(node.v), &child);
  if (r == CUDA_SUCCESS) graph.v = {reinterpret_cast<uint64_t>(child)};
  return r;
}

Status CudaBackend::GraphNodeFindInClone(Graph, GraphNode node, Graph clone, Created<GraphNode>& out) {
  return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphNodeFindInClone_(n, node_(node.v), graph_(clone)); });
}

Status CudaBackend::GraphRemoveDependencies(Graph g, GraphEdges e) {
  auto f = nodes_(e.from), t = nodes_(e.to);
  return d_.cuGraphRemoveDependencies_(graph_(g), f.data(), t.data(), nullptr, f.size());
}

Status CudaBackend::GraphExecNodeSetEnabled(GraphExec exec, Graph, GraphNode node, uint32_t enabled) {
  return d_.cuGraphNodeSetEnabled_(exec_(exec.v), node_(node.v), enabled);
}

Status CudaBackend::GraphExecNodeGetEnabled(GraphExec exec, Graph, GraphNode node, uint32_t& enabled) {
  unsigned int on = 0;
  CUresult r = d_.cuGraphNodeGetEnabled_(exec_(exec.v), node_(node.v), &on);
  enabled = on;
  return r;
}

Status CudaBackend::GraphExecChildGraphNodeSetParams(GraphExec exec, Graph, GraphNode node, ChildGraph child) {
  return d_.cuGraphExecChildGraphNodeSetParams_(exec_(exec.v), node_(node.v), graph_(child.v));
}

Status CudaBackend::GraphExecEventNodeSetEvent(GraphExec exec, Graph, GraphNode node, Event e, uint32_t wait) {
  return wait ? d_.cuGraphExecEventWaitNodeSetEvent_(exec_(exec.v), node_(node.v), event_(e))
              : d_.cuGraphExecEventRecordNodeSetEvent_(exec_(exec.v), node_(node.v), event_(e));
}

Status CudaBackend::GraphEventNodeSetEvent(Graph, GraphNode node, Event e, uint32_t wait) {
  return wait ? d_.cuGraphEventWaitNodeSetEvent_(node_(node.v), event_(e)) : d_.cuGraphEventRecordNodeSetEvent_(node_(node.v), event_(e));
}

Status CudaBackend::GraphMemsetNodeSetParams(Graph, GraphNode node, DevFillRect f, uint32_t value) {
  CUDA_MEMSET_NODE_PARAMS p = memsetParams(f, value);
  return d_.cuGraphMemsetNodeSetParams_(node_(node.v), &p);
}

Status CudaBackend::GraphMemcpyNodeSetParams(Graph, GraphNode node, DevCopyRect c) {
  CUDA_MEMCPY3D p = memcpyParams(c);
  return d_.cuGraphMemcpyNodeSetParams_(node_(node.v), &p);
}

Status CudaBackend::GraphHostNodeSetParams(Graph, GraphNode node, uint64_t id) {
  CUDA_HOST_NODE_PARAMS p{&hostFunc, keepHostFunc(id)};
  return d_.cuGraphHostNodeSetParams_(node_(node.v), &p);
}

Status CudaBackend::GraphNodeCount(Graph graph, uint64_t& nodes) {
  size_t n = 0;
  CUresult r = d_.cuGraphGetNodes_(reinterpret_cast<CUgraph>(graph.v), nullptr, &n);
  nodes = n;
  return r;
}
}  // namespace gpool::worker
