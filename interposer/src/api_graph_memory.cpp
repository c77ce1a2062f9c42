// Graph memory: allocation and free nodes (cuGraphAddMemAllocNode, cuGraphAddMemFreeNode, their getters),
// and the device's graph-memory figures and trim. The worker makes each node on its device and counts the
// memory graphs reserve against the lease (server/worker/graph_memory.h). An allocation node's address is
// recorded here as device memory of the graph's device for as long as the process runs: its node allocates
// it again at every launch. Stream capture of cuMemAllocAsync/cuMemFreeAsync makes the same nodes
// (api_memory_pool.cpp).
#include <cstring>
#include <vector>

#include "graph_nodes.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

uint64_t raw(const void* h) { return reinterpret_cast<uint64_t>(h); }


bool onDevice(const CUmemLocation& l, CUdevice device) { return l.type == CU_MEM_LOCATION_TYPE_DEVICE && l.id == device; }

// What gpool takes: device memory of the graph's own device, readable and writable there only. Peers are
// other workers (no access between them), and exportable handles would be IPC.
CUresult checkAllocation(const CUDA_MEM_ALLOC_NODE_PARAMS* p, CUdevice device) {
  if (!p || p->bytesize == 0 || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (p->accessDescCount && !p->accessDescs) return CUDA_ERROR_INVALID_VALUE;
  bool own = onDevice(p->poolProps.location, device) && p->poolProps.handleTypes == CU_MEM_HANDLE_TYPE_NONE;
  for (size_t i = 0; own && i < p->accessDescCount; ++i)
    own = onDevice(p->accessDescs[i].location, device) && p->accessDescs[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (own) return CUDA_SUCCESS;
  GPOOL_LOG(Level::kWarn, "a graph allocation node must allocate on the current device (%d), for it alone, with no shareable "
            "handle: a lease's devices are separate workers that cannot reach each other's memory", static_cast<int>(device));
  return CUDA_ERROR_NOT_SUPPORTED;
}

// Records a node this process made or learnt of, with the parameters its getter returns.
void remember(uint64_t node, uint64_t graph, CUgraphNodeType type, const CUDA_MEM_ALLOC_NODE_PARAMS& alloc, CUdeviceptr freed) {
  graphNodes().record(node, graph, type, [&](GraphNodeInfo& info) {
    info.alloc = alloc;
    info.access.assign(alloc.accessDescs, alloc.accessDescs + alloc.accessDescCount);
    info.alloc.accessDescs = info.access.empty() ? nullptr : info.access.data();
    info.freed = freed;
  });
}

// The parameters of a memory node of `type`: as recorded, or asked of the worker (a captured node).
CUresult nodeParams(CUgraphNode node, CUgraphNodeType type, GraphNodeInfo& out) {
  uint64_t graph = 0;
  if (!node || !graphNodes().graphOf(node, graph)) return CUDA_ERROR_INVALID_VALUE;
  bool known = graphNodes().withNode(node, type, [&](GraphNodeInfo& i) {
    if (i.alloc.dptr || i.freed) out = i;
  }) == CUDA_SUCCESS;
  if (!known) return CUDA_ERROR_INVALID_VALUE;  // another type of node
  if (out.alloc.dptr || out.freed) return CUDA_SUCCESS;
  GPOOL_CONN_OF_HANDLE(conn, graph);
  calls::GraphMemNodeGetParams::out::tuple r;
  if (int st = conn->call<calls::GraphMemNodeGetParams>(r, graph, raw(node))) return static_cast<CUresult>(st);
  CUdevice device = State::get().currentDevice();
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  CUmemAccessDesc rw{{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    alloc.poolProps.location = rw.location;
    alloc.accessDescs = &rw;
    alloc.accessDescCount = 1;
    alloc.bytesize = std::get<1>(r);
    alloc.dptr = std::get<0>(r);
  }
  remember(raw(node), graph, type, alloc, type == CU_GRAPH_NODE_TYPE_MEM_FREE ? std::get<0>(r) : 0);
  return graphNodes().withNode(node, type, [&](GraphNodeInfo& i) { out = i; });
}

// The device's graph-memory figures, from the worker that serves it.
CUresult graphMemFigures(CUdevice d, std::vector<uint64_t>& figures) {
  CUresult err;
  if (!State::get().ready(err)) return err;
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  GPOOL_CONN_OF_DEVICE(conn, d);
  calls::DeviceGraphMemGet::out::tuple r;
  if (int st = conn->call<calls::DeviceGraphMemGet>(r)) return static_cast<CUresult>(st);
  figures = std::move(std::get<0>(r));
  return figures.size() == 4 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

}  // namespace

CUresult gpool::client::addMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  if (!node || !graph) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  if (CUresult r = checkAllocation(p, State::get().currentDevice())) return r;
  calls::GraphAddMemAllocNode::out::tuple out;
  int st = conn->call<calls::GraphAddMemAllocNode>(out, raw(graph), graphDeps(d, n), p->bytesize);
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  *node = reinterpret_cast<CUgraphNode>(std::get<0>(out).v);
  p->dptr = std::get<1>(out).ptr;
  State::get().addGraphAllocation(p->dptr, p->bytesize, conn->index());
  remember(std::get<0>(out).v, raw(graph), CU_GRAPH_NODE_TYPE_MEM_ALLOC, *p, 0);
  return CUDA_SUCCESS;
}

CUresult gpool::client::addMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUdeviceptr ptr) {
  if (!node || !graph || !ptr) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  calls::GraphAddMemFreeNode::out::tuple out;
  int st = conn->call<calls::GraphAddMemFreeNode>(out, raw(graph), graphDeps(d, n), uint64_t{ptr});
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  *node = reinterpret_cast<CUgraphNode>(std::get<0>(out).v);
  remember(std::get<0>(out).v, raw(graph), CU_GRAPH_NODE_TYPE_MEM_FREE, CUDA_MEM_ALLOC_NODE_PARAMS{}, ptr);
  return CUDA_SUCCESS;
}

GPOOL_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  GPOOL_TRY return addMemAllocNode(node, graph, d, n, p); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUdeviceptr ptr) {
  GPOOL_TRY return addMemFreeNode(node, graph, d, n, ptr); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  GPOOL_TRY
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  GraphNodeInfo info;
  if (CUresult r = nodeParams(node, CU_GRAPH_NODE_TYPE_MEM_ALLOC, info)) return r;
  std::lock_guard lock(graphNodes().mu);  // the accessDescs CUDA returns are the node's own, as here
  *p = graphNodes().nodes.at(raw(node)).alloc;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* ptr) {
  GPOOL_TRY
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  GraphNodeInfo info;
  if (CUresult r = nodeParams(node, CU_GRAPH_NODE_TYPE_MEM_FREE, info)) return r;
  *ptr = info.freed;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// The device's graph memory is its worker's (one process per lease and device): what the lease's graphs
// use and hold in reserve, and its high watermarks.
GPOOL_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice d) {
  GPOOL_TRY
  CUresult err;
  if (!State::get().ready(err)) return err;
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  GPOOL_CONN_OF_DEVICE(conn, d);
  return static_cast<CUresult>(conn->call<calls::DeviceGraphMemTrim>());
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice d, CUgraphMem_attribute attr, void* value) {
  GPOOL_TRY
  if (!value || attr < CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT || attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint64_t> figures;
  if (CUresult r = graphMemFigures(d, figures)) return r;
  *static_cast<cuuint64_t*>(value) = figures[static_cast<size_t>(attr - CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)];
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice d, CUgraphMem_attribute attr, void* value) {
  GPOOL_TRY
  CUresult err;
  if (!State::get().ready(err)) return err;
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  // Only the high watermarks can be reset, and only to zero.
  bool high = attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH || attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH;
  if (!high || !value || *static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_DEVICE(conn, d);
  return static_cast<CUresult>(conn->call<calls::DeviceGraphMemResetHigh>(static_cast<uint32_t>(attr)));
  GPOOL_CATCH
}

CUresult gpool::client::settleGraphAllocations(Connection* conn, std::vector<uint64_t> freed) {
  if (State::get().graph_allocations.load() == 0) return CUDA_SUCCESS;
  calls::GraphAllocationsGone::out::tuple out;
  // A failure is an earlier asynchronous call's, which the worker reports at this first wait: the caller's.
  if (int st = conn->call<calls::GraphAllocationsGone>(out, gpool::proto::FreedAddresses{std::move(freed)}))
    return static_cast<CUresult>(st);
  State::get().forgetGraphAllocations(std::get<0>(out).v, conn->index());
  return CUDA_SUCCESS;
}
