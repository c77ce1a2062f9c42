// Batch memory-operation graph nodes (cuGraphAddBatchMemOpNode, its getter and setters, and the generic
// forms): waits on and writes of 32- and 64-bit device words, flushes of remote writes and barriers, made
// one node on the worker. The client keeps each node's operations for cuGraphBatchMemOpNodeGetParams,
// whose paramArray then points at the node's own copy, as CUDA's does.
#include <vector>

#include "graph_nodes.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;
using gpool::proto::MemOps;

namespace {

uint64_t raw(const void* h) { return reinterpret_cast<uint64_t>(h); }

// One operation as the worker takes it; a word must be device memory (a kernel's GPU cannot see this
// machine's), aligned to its size, as the driver says at once.
CUresult addOp(const CUstreamBatchMemOpParams& o, MemOps& m) {
  switch (o.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32: m.add(MemOps::kWait32, o.waitValue.flags, o.waitValue.address, o.waitValue.value); break;
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: m.add(MemOps::kWait64, o.waitValue.flags, o.waitValue.address, o.waitValue.value64); break;
    case CU_STREAM_MEM_OP_WRITE_VALUE_32: m.add(MemOps::kWrite32, o.writeValue.flags, o.writeValue.address, o.writeValue.value); break;
    case CU_STREAM_MEM_OP_WRITE_VALUE_64: m.add(MemOps::kWrite64, o.writeValue.flags, o.writeValue.address, o.writeValue.value64); break;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES: m.add(MemOps::kFlush, o.flushRemoteWrites.flags, 0, 0); return CUDA_SUCCESS;
    case CU_STREAM_MEM_OP_BARRIER: m.add(MemOps::kBarrier, o.memoryBarrier.flags, 0, 0); return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  size_t last = m.count() - 1;
  if (m.ptr(last) % m.bytes(last) != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t base;
  Allocation a;
  if (State::get().findAllocation(m.ptr(last), base, a) && !a.device) {
    GPOOL_LOG(Level::kWarn, "a batch memory-operation node on client host memory (%#llx) is not supported by gpool: the "
              "GPU cannot see this machine's memory; use device memory", static_cast<unsigned long long>(m.ptr(last)));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

CUresult memOpsOf(const CUDA_BATCH_MEM_OP_NODE_PARAMS* p, MemOps& m) {
  if (!p || !p->count || !p->paramArray || p->flags != 0 || p->count > MemOps::kMaxOps) return CUDA_ERROR_INVALID_VALUE;
  if (p->ctx && !State::get().isContext(p->ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  for (unsigned i = 0; i < p->count; ++i)
    if (CUresult r = addOp(p->paramArray[i], m)) return r;
  return CUDA_SUCCESS;
}

// What cuGraphBatchMemOpNodeGetParams answers: the operations as given, in the node's own copy.
void note(GraphNodeInfo& info, const CUDA_BATCH_MEM_OP_NODE_PARAMS& p) {
  info.memops.assign(p.paramArray, p.paramArray + p.count);
  info.batch = p;
  info.batch.paramArray = info.memops.data();
}

}  // namespace

CUresult gpool::client::addBatchMemOpNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n,
                                          const CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  if (!node || !graph) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  MemOps m;
  if (CUresult r = memOpsOf(p, m)) return r;
  calls::GraphAddBatchMemOpNode::out::tuple out;
  int st = conn->call<calls::GraphAddBatchMemOpNode>(out, raw(graph), graphDeps(d, n), m);
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  *node = reinterpret_cast<CUgraphNode>(std::get<0>(out).v);
  graphNodes().record(std::get<0>(out).v, raw(graph), CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, [p](GraphNodeInfo& info) { note(info, *p); });
  return CUDA_SUCCESS;
}

// New operations for the graph's node (exec null), or for one instantiation's (the graph keeps its own).
CUresult gpool::client::setBatchMemOpNode(CUgraphExec exec, CUgraphNode node, const CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  uint64_t graph = 0;
  if (!node || !graphNodes().graphOf(node, graph)) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, graph);
  MemOps m;
  if (CUresult r = memOpsOf(p, m)) return r;
  int st = exec ? conn->call<calls::GraphExecBatchMemOpNodeSetParams>(raw(exec), graph, raw(node), m)
                : conn->call<calls::GraphBatchMemOpNodeSetParams>(graph, raw(node), m);
  if (st != CUDA_SUCCESS || exec) return static_cast<CUresult>(st);
  return graphNodes().withNode(node, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, [p](GraphNodeInfo& i) { note(i, *p); });
}

CUresult gpool::client::batchMemOpNodeParams(CUgraphNode node, CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = graphNodes().withNode(node, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, [p](GraphNodeInfo& i) { *p = i.batch; })) return r;
  // A node the worker captured (cuStreamBatchMemOp in a capture) has no recorded operations: CUDA's getter
  // would give them, gpool's cannot.
  return p->paramArray ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GPOOL_EXPORT CUresult cuGraphAddBatchMemOpNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n,
                                               const CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  GPOOL_TRY return addBatchMemOpNode(node, graph, d, n, p); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphBatchMemOpNodeGetParams(CUgraphNode node, CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  GPOOL_TRY return batchMemOpNodeParams(node, p); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphBatchMemOpNodeSetParams(CUgraphNode node, const CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  GPOOL_TRY return setBatchMemOpNode(nullptr, node, p); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphExecBatchMemOpNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  GPOOL_TRY return exec ? setBatchMemOpNode(exec, node, p) : CUDA_ERROR_INVALID_VALUE; GPOOL_CATCH
}
