// Explicit CUDA graph construction (cuGraphCreate, cuGraphAdd*Node, cuGraphAddNode, dependencies, kernel
// node parameters, cuGraphExecUpdate), as XLA builds its command buffers. Graphs and nodes are the
// worker's; this file remembers each node's graph, type and kernel parameters for the queries CUDA answers
// from them. Copies in graph nodes are between device memory only: host memory is on this machine.
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;
using gpool::proto::DevRect;

namespace {

struct NodeInfo {
  uint64_t graph = 0;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUDA_KERNEL_NODE_PARAMS kernel{};  // kernel nodes: what cuGraphKernelNodeGetParams answers
  std::vector<uint8_t> packed;       // ... with kernelParams pointing into these bytes
  std::vector<void*> args;
};

std::mutex g_mu;
std::unordered_map<uint64_t, NodeInfo> g_nodes;

uint64_t raw(const void* h) { return reinterpret_cast<uint64_t>(h); }

gpool::proto::GraphNodes deps(const CUgraphNode* d, size_t n) {
  gpool::proto::GraphNodes out;
  for (size_t i = 0; i < n && d; ++i) out.v.push_back(raw(d[i]));
  return out;
}

template <typename Call, typename... A>
CUresult addNode(CUgraphNode* node, CUgraph graph, CUgraphNodeType type, A&&... args) {
  if (!node || !graph) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  typename Call::out::tuple out;
  int st = conn->call<Call>(out, raw(graph), std::forward<A>(args)...);
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  *node = reinterpret_cast<CUgraphNode>(std::get<0>(out).v);
  std::lock_guard lock(g_mu);
  g_nodes[std::get<0>(out).v] = NodeInfo{raw(graph), type};
  return CUDA_SUCCESS;
}

// Packs a kernel node's launch; `info` keeps the parameters for cuGraphKernelNodeGetParams.
CUresult kernelCall(const CUDA_KERNEL_NODE_PARAMS* p, gpool::proto::KernelCall& call, NodeInfo& info) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  uint64_t f = p->func ? raw(p->func) : raw(p->kern);
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  if (CUresult r = packKernelCall(f, grid, block, p->sharedMemBytes, p->kernelParams, p->extra, call, info.packed)) return r;
  info.kernel = *p;
  info.kernel.extra = nullptr;
  const std::vector<uint32_t>* layout = nullptr;
  info.args.clear();
  if (State::get().paramLayout(f, layout) == CUDA_SUCCESS && !p->extra)
    for (size_t i = 0; i + 1 < layout->size(); i += 2) info.args.push_back(info.packed.data() + (*layout)[i]);
  info.kernel.kernelParams = info.args.empty() ? nullptr : info.args.data();
  call.params = gpool::proto::Blob{info.packed.data(), info.packed.size()};
  return CUDA_SUCCESS;
}

// Remembers a kernel node's parameters (its kernelParams point into the kept bytes).
void keepKernel(uint64_t node, uint64_t graph, NodeInfo&& info) {
  std::lock_guard lock(g_mu);
  NodeInfo& kept = g_nodes[node];
  kept = std::move(info);
  kept.graph = graph;
  kept.type = CU_GRAPH_NODE_TYPE_KERNEL;
  kept.kernel.kernelParams = kept.args.empty() ? nullptr : kept.args.data();
}

CUresult addKernel(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_KERNEL_NODE_PARAMS* p) {
  NodeInfo info;
  gpool::proto::KernelCall call;
  if (CUresult r = kernelCall(p, call, info)) return r;
  if (CUresult r = addNode<calls::GraphAddKernelNode>(node, graph, CU_GRAPH_NODE_TYPE_KERNEL, deps(d, n), call)) return r;
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
  return addNode<calls::GraphAddMemsetNode>(node, graph, CU_GRAPH_NODE_TYPE_MEMSET, deps(d, n), f, uint32_t{p->value});
}

bool isDevice(CUmemorytype type, CUdeviceptr ptr) {
  if (type == CU_MEMORYTYPE_DEVICE) return true;
  uint64_t base;
  Allocation a;
  return type == CU_MEMORYTYPE_UNIFIED && State::get().findAllocation(ptr, base, a) && a.device;
}

CUresult copyOf(const CUDA_MEMCPY3D* c, gpool::proto::DevCopyRect& rect) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (!isDevice(c->srcMemoryType, c->srcDevice) || !isDevice(c->dstMemoryType, c->dstDevice) || c->Depth > 1 || c->srcZ || c->dstZ) {
    GPOOL_LOG(Level::kWarn, "a graph memcpy node to or from host memory or an array, or of several slices, is not supported "
              "by gpool (host memory is on this machine); copy outside the graph");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  uint64_t height = c->Height ? c->Height : 1;
  rect = gpool::proto::DevCopyRect{
      DevRect{c->dstDevice + c->dstY * c->dstPitch + c->dstXInBytes, c->dstPitch ? c->dstPitch : c->WidthInBytes, c->WidthInBytes, height},
      DevRect{c->srcDevice + c->srcY * c->srcPitch + c->srcXInBytes, c->srcPitch ? c->srcPitch : c->WidthInBytes, c->WidthInBytes, height}};
  return CUDA_SUCCESS;
}

CUresult addMemcpy(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_MEMCPY3D* c) {
  gpool::proto::DevCopyRect rect;
  if (CUresult r = copyOf(c, rect)) return r;
  return addNode<calls::GraphAddMemcpyNode>(node, graph, CU_GRAPH_NODE_TYPE_MEMCPY, deps(d, n), rect);
}

CUresult addHost(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUhostFn fn, void* data) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id = 0;
  if (CUresult r = hostFunctionId([fn, data] { fn(data); }, id)) return r;
  return addNode<calls::GraphAddHostNode>(node, graph, CU_GRAPH_NODE_TYPE_HOST, deps(d, n), id);
}

CUresult addEvent(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUevent e, bool wait) {
  return addNode<calls::GraphAddEventNode>(node, graph, wait ? CU_GRAPH_NODE_TYPE_WAIT_EVENT : CU_GRAPH_NODE_TYPE_EVENT_RECORD,
                                           deps(d, n), raw(e), uint32_t{wait});
}

CUresult addChild(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUgraph child) {
  return addNode<calls::GraphAddChildGraphNode>(node, graph, CU_GRAPH_NODE_TYPE_GRAPH, deps(d, n), gpool::proto::ChildGraph{raw(child)});
}

CUresult graphOf(CUgraphNode node, uint64_t& graph) {
  std::lock_guard lock(g_mu);
  auto it = g_nodes.find(raw(node));
  if (it == g_nodes.end()) return CUDA_ERROR_INVALID_VALUE;
  graph = it->second.graph;
  return CUDA_SUCCESS;
}

CUresult setKernel(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  GPOOL_CONN(conn);
  uint64_t graph = 0;
  if (CUresult r = graphOf(node, graph)) return r;
  NodeInfo info;
  gpool::proto::KernelCall call;
  if (CUresult r = kernelCall(p, call, info)) return r;
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
  GPOOL_TRY return addNode<calls::GraphAddEmptyNode>(node, graph, CU_GRAPH_NODE_TYPE_EMPTY, deps(d, n)); GPOOL_CATCH
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
    case CU_GRAPH_NODE_TYPE_EMPTY: return addNode<calls::GraphAddEmptyNode>(node, graph, CU_GRAPH_NODE_TYPE_EMPTY, deps(d, n));
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return addEvent(node, graph, d, n, p->eventRecord.event, false);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return addEvent(node, graph, d, n, p->eventWait.event, true);
    default:
      GPOOL_LOG(Level::kWarn, "graph nodes of type %d (conditional, memory, semaphore or batch nodes) are not supported by gpool yet",
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
  for (size_t i = 0; edges && i < n; ++i)
    if (edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || edges[i].from_port || edges[i].to_port) return CUDA_ERROR_NOT_SUPPORTED;
  return addGeneric(node, graph, d, n, p);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGraphAddDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, size_t n) {
  GPOOL_TRY
  GPOOL_CONN(conn);
  if (n && (!from || !to)) return CUDA_ERROR_INVALID_VALUE;
  return static_cast<CUresult>(conn->call<calls::GraphAddDependencies>(raw(graph), deps(from, n), deps(to, n)));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, const CUgraphEdgeData* edges, size_t n) {
  GPOOL_TRY
  for (size_t i = 0; edges && i < n; ++i)
    if (edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || edges[i].from_port || edges[i].to_port) return CUDA_ERROR_NOT_SUPPORTED;
  return cuGraphAddDependencies(graph, from, to, n);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGraphDestroyNode(CUgraphNode node) {
  GPOOL_TRY
  GPOOL_CONN(conn);
  uint64_t graph = 0;
  if (CUresult r = graphOf(node, graph)) return r;
  int st = conn->call<calls::GraphDestroyNode>(graph, raw(node));
  if (st == CUDA_SUCCESS) {
    std::lock_guard lock(g_mu);
    g_nodes.erase(raw(node));
  }
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  GPOOL_TRY
  if (!type) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mu);
  auto it = g_nodes.find(raw(node));
  if (it == g_nodes.end()) return CUDA_ERROR_INVALID_VALUE;
  *type = it->second.type;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  GPOOL_TRY
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mu);
  auto it = g_nodes.find(raw(node));
  if (it == g_nodes.end() || it->second.type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  *p = it->second.kernel;
  return CUDA_SUCCESS;
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
  GPOOL_CONN(conn);
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
  GPOOL_CONN(conn);
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
  uint64_t id = 0;
  if (CUresult r = hostFunctionId([fn = p->fn, data = p->userData] { fn(data); }, id)) return r;
  return setExecNode<calls::GraphExecHostNodeSetParams>(exec, node, id);
  GPOOL_CATCH
}
