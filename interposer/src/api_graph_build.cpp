// Explicit CUDA graph construction (cuGraphCreate, cuGraphAdd*Node, cuGraphAddNode, dependencies, node
// parameters on a graph and on an instantiation, cuGraphExecUpdate), as XLA builds its command buffers,
// conditional nodes included. Graphs and nodes are the worker's; the registry (graph_nodes.h) remembers
// each node's graph, type and parameters for the getters CUDA answers from them. Copies in graph nodes are
// between device memory only: host memory is on this machine.
#include <cstring>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "graph_nodes.h"
#include "captured_copies.h"
#include "host_rows.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;
using gpool::proto::DevRect;

GraphNodeRegistry& gpool::client::graphNodes() {
  static GraphNodeRegistry registry;
  return registry;
}

namespace {

using NodeInfo = GraphNodeInfo;

uint64_t raw(const void* h) { return reinterpret_cast<uint64_t>(h); }


// Adds a node on the worker and records it, with what `note` fills in from the call's arguments or its
// reply (its parameters, a conditional node's bodies).
template <typename Call>
using Note = std::function<void(NodeInfo&, const typename Call::out::tuple& reply)>;
template <typename Call, typename... A>
CUresult addNoted(CUgraphNode* node, CUgraph graph, CUgraphNodeType type, const Note<Call>& note, A&&... args) {
  if (!node || !graph) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  typename Call::out::tuple out;
  int st = conn->call<Call>(out, raw(graph), std::forward<A>(args)...);
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  *node = reinterpret_cast<CUgraphNode>(std::get<0>(out).v);
  graphNodes().record(std::get<0>(out).v, raw(graph), type, [&](NodeInfo& info) {
    if (note) note(info, out);
  });
  return CUDA_SUCCESS;
}
template <typename Call, typename... A>
CUresult addNode(CUgraphNode* node, CUgraph graph, CUgraphNodeType type, A&&... args) {
  return addNoted<Call>(node, graph, type, nullptr, std::forward<A>(args)...);
}

// Packs a kernel node's launch; `info` keeps the parameters for cuGraphKernelNodeGetParams.
// `conn`: the graph's worker, where the kernel will run.
CUresult kernelCall(const Connection* conn, const CUDA_KERNEL_NODE_PARAMS* p, gpool::proto::KernelCall& call, NodeInfo& info) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  uint64_t f = p->func ? raw(p->func) : raw(p->kern);
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  if (CUresult r = packKernelCall(f, grid, block, p->sharedMemBytes, p->kernelParams, p->extra, conn->index(), call, info.packed))
    return r;
  info.kernel = *p;
  info.kernel.extra = nullptr;
  State::ParamLayout layout;
  info.args.clear();
  info.kernel.kernelParams = nullptr;
  if (State::get().paramLayout(f, layout) == CUDA_SUCCESS && !p->extra) info.pointArgs(*layout);
  call.params = gpool::proto::Blob{info.packed.data(), info.packed.size()};
  return CUDA_SUCCESS;
}

// Remembers a kernel node's parameters (its kernelParams point into the kept bytes).
void keepKernel(uint64_t node, uint64_t graph, NodeInfo&& info) {
  std::lock_guard lock(graphNodes().mu);
  NodeInfo& kept = graphNodes().nodes[node];
  kept = std::move(info);
  kept.graph = graph;
  kept.type = CU_GRAPH_NODE_TYPE_KERNEL;
  kept.kernel.kernelParams = kept.args.empty() ? nullptr : kept.args.data();
}

CUresult addKernel(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  NodeInfo info;
  gpool::proto::KernelCall call;
  if (CUresult r = kernelCall(conn, p, call, info)) return r;
  if (CUresult r = addNode<calls::GraphAddKernelNode>(node, graph, CU_GRAPH_NODE_TYPE_KERNEL, graphDeps(d, n), call)) return r;
  keepKernel(raw(*node), raw(graph), std::move(info));
  return CUDA_SUCCESS;
}

CUresult fillOf(const CUDA_MEMSET_NODE_PARAMS* p, gpool::proto::DevFillRect& f) {
  if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t width = uint64_t{p->width} * p->elementSize;
  uint64_t pitch = p->height > 1 ? p->pitch : width;
  f = gpool::proto::DevFillRect{DevRect{p->dst, pitch, width, p->height}, p->elementSize};
  return CUDA_SUCCESS;
}

CUresult addMemset(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_MEMSET_NODE_PARAMS* p) {
  gpool::proto::DevFillRect f;
  if (CUresult r = fillOf(p, f)) return r;
  return addNoted<calls::GraphAddMemsetNode>(node, graph, CU_GRAPH_NODE_TYPE_MEMSET, [p](NodeInfo& i, const auto&) { i.memset = *p; },
                                             graphDeps(d, n), f, uint32_t{p->value});
}

bool isDevice(CUmemorytype type, CUdeviceptr ptr) {
  if (type == CU_MEMORYTYPE_DEVICE) return true;
  uint64_t base;
  Allocation a;
  return type == CU_MEMORYTYPE_UNIFIED && State::get().findAllocation(ptr, base, a) && a.device;
}

// One end of a 2D copy as rows: its first row at (x, y) from `base`; a pitch of 0 is the copy's width.
DevRect rowsAt(uint64_t base, uint64_t pitch, uint64_t x, uint64_t y, uint64_t width, uint64_t height) {
  return DevRect{base + y * pitch + x, pitch ? pitch : width, width, height};
}

CUresult copyOf(const CUDA_MEMCPY3D* c, gpool::proto::DevCopyRect& rect) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (!isDevice(c->srcMemoryType, c->srcDevice) || !isDevice(c->dstMemoryType, c->dstDevice) || c->Depth > 1 || c->srcZ || c->dstZ) {
    GPOOL_LOG(Level::kWarn, "a graph memcpy node to or from an array, between two host buffers, or of several slices, is not "
              "supported by gpool; copy outside the graph");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  uint64_t height = c->Height ? c->Height : 1;
  rect = gpool::proto::DevCopyRect{rowsAt(c->dstDevice, c->dstPitch, c->dstXInBytes, c->dstY, c->WidthInBytes, height),
                                   rowsAt(c->srcDevice, c->srcPitch, c->srcXInBytes, c->srcY, c->WidthInBytes, height)};
  return CUDA_SUCCESS;
}

// One end of a copy as host memory: its address, when it is this process's memory and not an array.
bool hostEnd(CUmemorytype type, const void* host, CUdeviceptr ptr, uint64_t& addr) {
  if (type == CU_MEMORYTYPE_HOST) addr = reinterpret_cast<uint64_t>(host);
  else if (type == CU_MEMORYTYPE_UNIFIED && !isDevice(type, ptr)) addr = ptr;
  else return false;
  return addr != 0;
}

// A memcpy node between host memory and device memory (simpleCudaGraphs, jacobiCudaGraphs): the worker's
// node moves the host rows on the host-function channel at every launch (captured_copies.h).
CUresult addHostCopy(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_MEMCPY3D* c, bool to_device,
                     uint64_t host) {
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  if (CUresult r = openHostChannel(conn)) return r;
  const uint64_t height = c->Height ? c->Height : 1;
  const DevRect src = rowsAt(to_device ? host : c->srcDevice, c->srcPitch, c->srcXInBytes, c->srcY, c->WidthInBytes, height);
  const DevRect dst = rowsAt(to_device ? c->dstDevice : host, c->dstPitch, c->dstXInBytes, c->dstY, c->WidthInBytes, height);
  const DevRect& host_rows = to_device ? src : dst;
  uint64_t id = registerHostRows({host_rows.ptr, host_rows.pitch, host_rows.width, host_rows.height});
  gpool::proto::HostRowsCopy copy{to_device ? gpool::proto::HostRowsCopy::kToDevice : gpool::proto::HostRowsCopy::kFromDevice,
                                  to_device ? dst : src};
  CUresult r = addNoted<calls::GraphAddHostCopyNode>(node, graph, CU_GRAPH_NODE_TYPE_MEMCPY, [c](NodeInfo& i, const auto&) { i.copy = *c; },
                                                     graphDeps(d, n), copy, id);
  if (r != CUDA_SUCCESS) forgetHostRows(id);
  return r;
}

CUresult addMemcpy(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_MEMCPY3D* c) {
  uint64_t host = 0;
  if (c && c->Depth <= 1 && !c->srcZ && !c->dstZ && c->WidthInBytes) {
    if (hostEnd(c->srcMemoryType, c->srcHost, c->srcDevice, host) && isDevice(c->dstMemoryType, c->dstDevice))
      return addHostCopy(node, graph, d, n, c, true, host);
    if (hostEnd(c->dstMemoryType, c->dstHost, c->dstDevice, host) && isDevice(c->srcMemoryType, c->srcDevice))
      return addHostCopy(node, graph, d, n, c, false, host);
  }
  gpool::proto::DevCopyRect rect;
  if (CUresult r = copyOf(c, rect)) return r;
  return addNoted<calls::GraphAddMemcpyNode>(node, graph, CU_GRAPH_NODE_TYPE_MEMCPY, [c](NodeInfo& i, const auto&) { i.copy = *c; }, graphDeps(d, n), rect);
}

CUresult addHost(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUhostFn fn, void* data) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  uint64_t id = 0;
  if (CUresult r = hostFunctionId(conn, [fn, data] { fn(data); }, id)) return r;
  return addNoted<calls::GraphAddHostNode>(node, graph, CU_GRAPH_NODE_TYPE_HOST, [fn, data](NodeInfo& i, const auto&) { i.host = {fn, data}; },
                                           graphDeps(d, n), id);
}

CUresult addEvent(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUevent e, bool wait) {
  return addNoted<calls::GraphAddEventNode>(node, graph, wait ? CU_GRAPH_NODE_TYPE_WAIT_EVENT : CU_GRAPH_NODE_TYPE_EVENT_RECORD,
                                            [e](NodeInfo& i, const auto&) { i.event = e; }, graphDeps(d, n), raw(e), uint32_t{wait});
}

CUresult addChild(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUgraph child) {
  return addNode<calls::GraphAddChildGraphNode>(node, graph, CU_GRAPH_NODE_TYPE_GRAPH, graphDeps(d, n), gpool::proto::ChildGraph{raw(child)});
}

// A conditional node: the worker makes its body graphs, which the caller fills through phGraph_out (an
// array that lives as long as the node's record).
CUresult addConditional(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUDA_CONDITIONAL_NODE_PARAMS& c) {
  auto bodies = [&c](NodeInfo& i, const calls::GraphAddConditionalNode::out::tuple& reply) {
    for (uint64_t b : std::get<1>(reply).v) i.bodies.push_back(reinterpret_cast<CUgraph>(b));
    c.phGraph_out = i.bodies.data();
  };
  return addNoted<calls::GraphAddConditionalNode>(node, graph, CU_GRAPH_NODE_TYPE_CONDITIONAL, bodies, graphDeps(d, n), uint64_t{c.handle},
                                                  static_cast<uint32_t>(c.type), c.size);
}

CUresult graphOf(CUgraphNode node, uint64_t& graph) {
  return graphNodes().graphOf(node, graph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// In an instantiation (`exec`), or in the node's graph (no exec), whichever device is current.
CUresult setKernel(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  uint64_t graph = 0;
  if (CUresult r = graphOf(node, graph)) return r;
  GPOOL_CONN_OF_HANDLE(conn, exec ? raw(exec) : graph);
  NodeInfo info;
  gpool::proto::KernelCall call;
  if (CUresult r = kernelCall(conn, p, call, info)) return r;
  int st = exec ? conn->call<calls::GraphExecKernelNodeSetParams>(raw(exec), graph, raw(node), call)
                : conn->call<calls::GraphKernelNodeSetParams>(graph, raw(node), call);
  if (st == CUDA_SUCCESS && !exec) keepKernel(raw(node), graph, std::move(info));
  return static_cast<CUresult>(st);
}

// The v1 kernel node parameters are the v2 ones without the kernel and context fields.
CUDA_KERNEL_NODE_PARAMS fromV1(const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  CUDA_KERNEL_NODE_PARAMS v2{};
  std::memcpy(&v2, p, sizeof *p);
  return v2;
}

}  // namespace

GPOOL_EXPORT CUresult cuGraphCreate(CUgraph* graph, unsigned int flags) {
  GPOOL_TRY
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  calls::GraphCreate::out::tuple out;
  int st = conn->call<calls::GraphCreate>(out, uint32_t{flags});
  *graph = st == CUDA_SUCCESS ? reinterpret_cast<CUgraph>(std::get<0>(out).v) : nullptr;
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n) {
  GPOOL_TRY return addNode<calls::GraphAddEmptyNode>(node, graph, CU_GRAPH_NODE_TYPE_EMPTY, graphDeps(d, n)); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_KERNEL_NODE_PARAMS* p) {
  GPOOL_TRY return addKernel(node, graph, d, n, p); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddKernelNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  GPOOL_TRY if (!p) return CUDA_ERROR_INVALID_VALUE; CUDA_KERNEL_NODE_PARAMS v2 = fromV1(p); return addKernel(node, graph, d, n, &v2); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  GPOOL_TRY return addMemset(node, graph, d, n, p); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_MEMCPY3D* c, CUcontext) {
  GPOOL_TRY return addMemcpy(node, graph, d, n, c); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddHostNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_HOST_NODE_PARAMS* p) {
  GPOOL_TRY return p ? addHost(node, graph, d, n, p->fn, p->userData) : CUDA_ERROR_INVALID_VALUE; GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddEventRecordNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUevent e) {
  GPOOL_TRY return addEvent(node, graph, d, n, e, false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddEventWaitNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUevent e) {
  GPOOL_TRY return addEvent(node, graph, d, n, e, true); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUgraph child) {
  GPOOL_TRY return addChild(node, graph, d, n, child); GPOOL_CATCH
}

// The generic form (CUDA 12.2): the node types above; others are refused, naming the type.
namespace {
CUDA_BATCH_MEM_OP_NODE_PARAMS batchOf(const CUDA_BATCH_MEM_OP_NODE_PARAMS_v2& b) {
  return CUDA_BATCH_MEM_OP_NODE_PARAMS{b.ctx, b.count, b.paramArray, b.flags};
}
CUresult addGeneric(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUgraphNodeParams* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      CUDA_KERNEL_NODE_PARAMS k{};
      std::memcpy(&k, &p->kernel, sizeof k);
      return addKernel(node, graph, d, n, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: return addMemcpy(node, graph, d, n, &p->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      CUDA_MEMSET_NODE_PARAMS m{p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize, p->memset.width, p->memset.height};
      return addMemset(node, graph, d, n, &m);
    }
    case CU_GRAPH_NODE_TYPE_HOST: return addHost(node, graph, d, n, p->host.fn, p->host.userData);
    case CU_GRAPH_NODE_TYPE_GRAPH: return addChild(node, graph, d, n, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EMPTY: return addNode<calls::GraphAddEmptyNode>(node, graph, CU_GRAPH_NODE_TYPE_EMPTY, graphDeps(d, n));
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return addEvent(node, graph, d, n, p->eventRecord.event, false);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return addEvent(node, graph, d, n, p->eventWait.event, true);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: return addConditional(node, graph, d, n, p->conditional);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == sizeof(p->alloc));
      CUDA_MEM_ALLOC_NODE_PARAMS a;
      std::memcpy(&a, &p->alloc, sizeof a);
      CUresult r = addMemAllocNode(node, graph, d, n, &a);
      p->alloc.dptr = a.dptr;
      return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return addMemFreeNode(node, graph, d, n, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
      CUDA_BATCH_MEM_OP_NODE_PARAMS b = batchOf(p->memOp);
      return addBatchMemOpNode(node, graph, d, n, &b);
    }
    default:
      GPOOL_LOG(Level::kWarn, "graph nodes of type %d (external semaphore nodes) are not supported by gpool",
                static_cast<int>(p->type));
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}
}  // namespace
GPOOL_EXPORT CUresult cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUgraphNodeParams* p) {
  GPOOL_TRY return addGeneric(node, graph, d, n, p); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, const CUgraphEdgeData* edges, size_t n,
                                        CUgraphNodeParams* p) {
  GPOOL_TRY
  if (!plainEdges(edges, n)) return CUDA_ERROR_NOT_SUPPORTED;
  return addGeneric(node, graph, d, n, p);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGraphAddDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, size_t n) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  if (n && (!from || !to)) return CUDA_ERROR_INVALID_VALUE;
  return static_cast<CUresult>(conn->call<calls::GraphAddDependencies>(raw(graph), gpool::proto::GraphEdges{graphDeps(from, n), graphDeps(to, n)}));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, const CUgraphEdgeData* edges, size_t n) {
  GPOOL_TRY
  if (!plainEdges(edges, n)) return CUDA_ERROR_NOT_SUPPORTED;
  return cuGraphAddDependencies(graph, from, to, n);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGraphDestroyNode(CUgraphNode node) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, raw(node));
  uint64_t graph = 0;
  if (CUresult r = graphOf(node, graph)) return r;
  int st = conn->call<calls::GraphDestroyNode>(graph, raw(node));
  if (st == CUDA_SUCCESS) {
    std::lock_guard lock(graphNodes().mu);
    graphNodes().nodes.erase(raw(node));
  }
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  GPOOL_TRY
  if (!type) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(graphNodes().mu);
  auto it = graphNodes().nodes.find(raw(node));
  if (it == graphNodes().nodes.end()) return CUDA_ERROR_INVALID_VALUE;
  *type = it->second.type;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  GPOOL_TRY
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = knownParams(node, CU_GRAPH_NODE_TYPE_KERNEL)) return r;
  return graphNodes().withNode(node, CU_GRAPH_NODE_TYPE_KERNEL, [p](NodeInfo& i) { *p = i.kernel; });
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  GPOOL_TRY return setKernel(nullptr, node, p); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  GPOOL_TRY return exec ? setKernel(exec, node, p) : CUDA_ERROR_INVALID_VALUE; GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, raw(exec));
  calls::GraphExecUpdate::out::tuple out;
  int st = conn->call<calls::GraphExecUpdate>(out, raw(exec), raw(graph));
  if (info) {
    *info = CUgraphExecUpdateResultInfo{};
    info->result = static_cast<CUgraphExecUpdateResult>(std::get<0>(out));
  }
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

// New parameters for one node of an instantiation (the graph keeps its own).
namespace {
template <typename Call, typename... A>
CUresult setExecNode(CUgraphExec exec, CUgraphNode node, A&&... args) {
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(exec));
  uint64_t graph = 0;
  if (CUresult r = graphOf(node, graph)) return r;
  return static_cast<CUresult>(conn->call<Call>(raw(exec), graph, raw(node), std::forward<A>(args)...));
}
}  // namespace
GPOOL_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  GPOOL_TRY
  gpool::proto::DevFillRect f;
  if (CUresult r = fillOf(p, f)) return r;
  return setExecNode<calls::GraphExecMemsetNodeSetParams>(exec, node, f, uint32_t{p->value});
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* c, CUcontext) {
  GPOOL_TRY
  gpool::proto::DevCopyRect rect;
  if (CUresult r = copyOf(c, rect)) return r;
  return setExecNode<calls::GraphExecMemcpyNodeSetParams>(exec, node, rect);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  GPOOL_TRY
  if (!p || !p->fn) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(exec));
  uint64_t id = 0;
  if (CUresult r = hostFunctionId(conn, [fn = p->fn, data = p->userData] { fn(data); }, id)) return r;
  return setExecNode<calls::GraphExecHostNodeSetParams>(exec, node, id);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child) {
  GPOOL_TRY return setExecNode<calls::GraphExecChildGraphNodeSetParams>(exec, node, gpool::proto::ChildGraph{raw(child)}); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent e) {
  GPOOL_TRY return setExecNode<calls::GraphExecEventNodeSetEvent>(exec, node, raw(e), uint32_t{0}); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent e) {
  GPOOL_TRY return setExecNode<calls::GraphExecEventNodeSetEvent>(exec, node, raw(e), uint32_t{1}); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int enabled) {
  GPOOL_TRY return setExecNode<calls::GraphExecNodeSetEnabled>(exec, node, uint32_t{enabled != 0}); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int* enabled) {
  GPOOL_TRY
  if (!exec || !enabled) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(exec));
  uint64_t graph = 0;
  if (CUresult r = graphOf(node, graph)) return r;
  std::tuple<uint32_t> out;
  int st = conn->call<calls::GraphExecNodeGetEnabled>(out, raw(exec), graph, raw(node));
  if (st == CUDA_SUCCESS) *enabled = std::get<0>(out);
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

// Conditional handles: made for a graph; kernels in it set them with cudaGraphSetConditional.
GPOOL_EXPORT CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle* handle, CUgraph graph, CUcontext, unsigned int initial,
                                                     unsigned int flags) {
  GPOOL_TRY
  if (!handle || !graph) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  calls::GraphConditionalHandleCreate::out::tuple out;
  int st = conn->call<calls::GraphConditionalHandleCreate>(out, raw(graph), uint32_t{initial}, uint32_t{flags});
  if (st == CUDA_SUCCESS) *handle = std::get<0>(out).v;
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

// New parameters for a node of the graph itself (instantiations keep theirs); recorded for the getters.
namespace {
template <typename Call, typename... A>
CUresult setGraphNode(CUgraphNode node, CUgraphNodeType type, const std::function<void(NodeInfo&)>& note, A&&... args) {
  GPOOL_CONN_OF_HANDLE(conn, raw(node));
  uint64_t graph = 0;
  if (CUresult r = graphOf(node, graph)) return r;
  int st = conn->call<Call>(graph, raw(node), std::forward<A>(args)...);
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  return note ? graphNodes().withNode(node, type, note) : CUDA_SUCCESS;  // nothing here to remember
}
CUresult setMemset(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p) {
  gpool::proto::DevFillRect f;
  if (CUresult r = fillOf(p, f)) return r;
  return setGraphNode<calls::GraphMemsetNodeSetParams>(node, CU_GRAPH_NODE_TYPE_MEMSET, [p](NodeInfo& i) { i.memset = *p; }, f,
                                                       uint32_t{p->value});
}
CUresult setMemcpy(CUgraphNode node, const CUDA_MEMCPY3D* c) {
  gpool::proto::DevCopyRect rect;
  if (CUresult r = copyOf(c, rect)) return r;
  return setGraphNode<calls::GraphMemcpyNodeSetParams>(node, CU_GRAPH_NODE_TYPE_MEMCPY, [c](NodeInfo& i) { i.copy = *c; }, rect);
}
CUresult setHost(CUgraphNode node, CUhostFn fn, void* data) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(node));
  uint64_t id = 0;
  if (CUresult r = hostFunctionId(conn, [fn, data] { fn(data); }, id)) return r;
  return setGraphNode<calls::GraphHostNodeSetParams>(node, CU_GRAPH_NODE_TYPE_HOST, [fn, data](NodeInfo& i) { i.host = {fn, data}; }, id);
}
CUresult setEvent(CUgraphNode node, CUevent e, bool wait) {
  return setGraphNode<calls::GraphEventNodeSetEvent>(node, wait ? CU_GRAPH_NODE_TYPE_WAIT_EVENT : CU_GRAPH_NODE_TYPE_EVENT_RECORD,
                                                     [e](NodeInfo& i) { i.event = e; }, raw(e), uint32_t{wait});
}
CUresult getEvent(CUgraphNode node, CUevent* e, bool wait) {
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeType type = wait ? CU_GRAPH_NODE_TYPE_WAIT_EVENT : CU_GRAPH_NODE_TYPE_EVENT_RECORD;
  if (CUresult r = knownParams(node, type)) return r;
  return graphNodes().withNode(node, type, [e](NodeInfo& i) { *e = i.event; });
}
CUDA_MEMSET_NODE_PARAMS memsetOf(const CUDA_MEMSET_NODE_PARAMS_v2& m) {
  return CUDA_MEMSET_NODE_PARAMS{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
}
CUDA_KERNEL_NODE_PARAMS kernelOf(const CUDA_KERNEL_NODE_PARAMS_v3& k) {
  CUDA_KERNEL_NODE_PARAMS out{};
  std::memcpy(&out, &k, sizeof out);
  return out;
}
}  // namespace

GPOOL_EXPORT CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p) {
  GPOOL_TRY return setMemset(node, p); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* p) {
  GPOOL_TRY
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = knownParams(node, CU_GRAPH_NODE_TYPE_MEMSET)) return r;
  return graphNodes().withNode(node, CU_GRAPH_NODE_TYPE_MEMSET, [p](NodeInfo& i) { *p = i.memset; });
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* c) {
  GPOOL_TRY return setMemcpy(node, c); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* c) {
  GPOOL_TRY
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = knownParams(node, CU_GRAPH_NODE_TYPE_MEMCPY)) return r;
  return graphNodes().withNode(node, CU_GRAPH_NODE_TYPE_MEMCPY, [c](NodeInfo& i) { *c = i.copy; });
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  GPOOL_TRY return p ? setHost(node, p->fn, p->userData) : CUDA_ERROR_INVALID_VALUE; GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* p) {
  GPOOL_TRY
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = knownParams(node, CU_GRAPH_NODE_TYPE_HOST)) return r;
  return graphNodes().withNode(node, CU_GRAPH_NODE_TYPE_HOST, [p](NodeInfo& i) { *p = i.host; });
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode node, CUevent e) { GPOOL_TRY return setEvent(node, e, false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode node, CUevent e) { GPOOL_TRY return setEvent(node, e, true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent* e) { GPOOL_TRY return getEvent(node, e, false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent* e) { GPOOL_TRY return getEvent(node, e, true); GPOOL_CATCH }

// The generic setters (CUDA 12.2): by the parameters' type, the typed setters above.
GPOOL_EXPORT CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* p) {
  GPOOL_TRY
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      CUDA_KERNEL_NODE_PARAMS k = kernelOf(p->kernel);
      return setKernel(nullptr, node, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      CUDA_MEMSET_NODE_PARAMS m = memsetOf(p->memset);
      return setMemset(node, &m);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: return setMemcpy(node, &p->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_HOST: return setHost(node, p->host.fn, p->host.userData);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return setEvent(node, p->eventRecord.event, false);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return setEvent(node, p->eventWait.event, true);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
      CUDA_BATCH_MEM_OP_NODE_PARAMS b = batchOf(p->memOp);
      return setBatchMemOpNode(nullptr, node, &b);
    }
    default: return CUDA_ERROR_NOT_SUPPORTED;  // as the driver answers for types it cannot update
  }
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* p) {
  GPOOL_TRY
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      CUDA_KERNEL_NODE_PARAMS k = kernelOf(p->kernel);
      return exec ? setKernel(exec, node, &k) : CUDA_ERROR_INVALID_VALUE;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      CUDA_MEMSET_NODE_PARAMS m = memsetOf(p->memset);
      return cuGraphExecMemsetNodeSetParams(exec, node, &m, nullptr);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: return cuGraphExecMemcpyNodeSetParams(exec, node, &p->memcpy.copyParams, nullptr);
    case CU_GRAPH_NODE_TYPE_HOST: {
      CUDA_HOST_NODE_PARAMS h{p->host.fn, p->host.userData};
      return cuGraphExecHostNodeSetParams(exec, node, &h);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: return cuGraphExecChildGraphNodeSetParams(exec, node, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return cuGraphExecEventRecordNodeSetEvent(exec, node, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return cuGraphExecEventWaitNodeSetEvent(exec, node, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
      CUDA_BATCH_MEM_OP_NODE_PARAMS b = batchOf(p->memOp);
      return exec ? setBatchMemOpNode(exec, node, &b) : CUDA_ERROR_INVALID_VALUE;
    }
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
  GPOOL_CATCH
}

// A kernel node's launch attributes live with the node on the worker.
GPOOL_EXPORT CUresult cuGraphKernelNodeSetAttribute(CUgraphNode node, CUkernelNodeAttrID attr, const CUkernelNodeAttrValue* value) {
  GPOOL_TRY
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  CUlaunchAttribute a{};
  a.id = attr;
  a.value = *value;
  return setGraphNode<calls::GraphKernelNodeSetAttribute>(node, CU_GRAPH_NODE_TYPE_KERNEL, nullptr,
                                                          gpool::proto::LaunchAttrs{gpool::proto::Blob{&a, sizeof a}});
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphKernelNodeGetAttribute(CUgraphNode node, CUkernelNodeAttrID attr, CUkernelNodeAttrValue* value) {
  GPOOL_TRY
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(node));
  uint64_t graph = 0;
  if (CUresult r = graphOf(node, graph)) return r;
  std::tuple<std::vector<uint8_t>> out;
  int st = conn->call<calls::GraphKernelNodeGetAttribute>(out, graph, raw(node), static_cast<uint32_t>(attr));
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  if (std::get<0>(out).size() != sizeof *value) return CUDA_ERROR_UNKNOWN;
  std::memcpy(value, std::get<0>(out).data(), sizeof *value);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, raw(dst));
  uint64_t to = 0, from = 0;
  if (CUresult r = graphOf(dst, to)) return r;
  if (CUresult r = graphOf(src, from)) return r;
  return static_cast<CUresult>(conn->call<calls::GraphKernelNodeCopyAttributes>(to, raw(dst), from, raw(src)));
  GPOOL_CATCH
}
