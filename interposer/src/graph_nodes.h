// What the client remembers of each graph node it has seen (added here, listed from the worker, or found
// in a clone): its graph, its type, and the parameters CUDA's node getters return. Graphs and nodes
// themselves live on the worker; this is the one registry of api_graph_build.cpp and api_graph_query.cpp.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "log.h"
#include "state.h"

namespace gpool::client {

struct GraphNodeInfo {
  uint64_t graph = 0;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUDA_KERNEL_NODE_PARAMS kernel{};  // kernel nodes: kernelParams points into `args`, which point into `packed`
  std::vector<uint8_t> packed;
  std::vector<void*> args;
  CUDA_MEMSET_NODE_PARAMS memset{};
  CUDA_MEMCPY3D copy{};
  CUDA_HOST_NODE_PARAMS host{};
  CUevent event = nullptr;
  std::vector<CUgraph> bodies;  // conditional nodes: what the caller's phGraph_out points at
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};  // memory nodes (api_graph_memory.cpp): accessDescs points at `access`
  std::vector<CUmemAccessDesc> access;
  CUdeviceptr freed = 0;               // a free node's allocation
  CUDA_BATCH_MEM_OP_NODE_PARAMS batch{};  // batch memory-operation nodes (api_graph_memops.cpp): paramArray
  std::vector<CUstreamBatchMemOpParams> memops;  // points at `memops`

  // Points kernelParams at each argument in `packed`, placed by the function's `layout` (offset, size pairs);
  // false, pointing at none, when `packed` is too short for it.
  bool pointArgs(const std::vector<uint32_t>& layout) {
    args.clear();
    for (size_t i = 0; i + 1 < layout.size(); i += 2) {
      if (uint64_t{layout[i]} + layout[i + 1] > packed.size()) {
        args.clear();
        kernel.kernelParams = nullptr;
        return false;
      }
      args.push_back(packed.data() + layout[i]);
    }
    kernel.kernelParams = args.empty() ? nullptr : args.data();
    return true;
  }

  GraphNodeInfo() = default;
  GraphNodeInfo(GraphNodeInfo&&) = default;
  GraphNodeInfo& operator=(GraphNodeInfo&&) = default;
  // A copy (a clone's node) points its kernel arguments into its own bytes.
  GraphNodeInfo(const GraphNodeInfo& o) { *this = o; }
  GraphNodeInfo& operator=(const GraphNodeInfo& o) {
    if (this == &o) return *this;
    graph = o.graph, type = o.type, kernel = o.kernel, packed = o.packed, memset = o.memset, copy = o.copy;
    host = o.host, event = o.event, bodies = o.bodies, alloc = o.alloc, access = o.access, freed = o.freed;
    batch = o.batch, memops = o.memops;
    alloc.accessDescs = access.empty() ? nullptr : access.data();
    batch.paramArray = memops.empty() ? nullptr : memops.data();
    args.clear();
    for (void* a : o.args) args.push_back(packed.data() + (static_cast<uint8_t*>(a) - o.packed.data()));
    kernel.kernelParams = args.empty() ? nullptr : args.data();
    return *this;
  }
};

struct GraphNodeRegistry {
  std::mutex mu;
  std::unordered_map<uint64_t, GraphNodeInfo> nodes;

  // The node's graph; false for a node this process never saw.
  bool graphOf(CUgraphNode node, uint64_t& graph) {
    std::lock_guard lock(mu);
    auto it = nodes.find(reinterpret_cast<uint64_t>(node));
    if (it == nodes.end()) return false;
    graph = it->second.graph;
    return true;
  }
  // Runs f(info) on a node's record under the lock, when the node is known and of `type`.
  template <typename F>
  CUresult withNode(CUgraphNode node, CUgraphNodeType type, F f) {
    std::lock_guard lock(mu);
    auto it = nodes.find(reinterpret_cast<uint64_t>(node));
    if (it == nodes.end() || it->second.type != type) return CUDA_ERROR_INVALID_VALUE;
    f(it->second);
    return CUDA_SUCCESS;
  }
  // Records `node` afresh, of `graph` and `type`; fill(info) adds what its getters return, under the lock.
  template <typename F>
  void record(uint64_t node, uint64_t graph, CUgraphNodeType type, F fill) {
    std::lock_guard lock(mu);
    GraphNodeInfo& info = nodes[node];
    info = GraphNodeInfo{};
    info.graph = graph;
    info.type = type;
    fill(info);
  }
  void forgetGraph(uint64_t graph) {
    std::lock_guard lock(mu);
    std::erase_if(nodes, [graph](const auto& e) { return e.second.graph == graph; });
  }
};

GraphNodeRegistry& graphNodes();

// Whether every edge is a plain one (gpool forwards no other kind); no edge data means plain edges.
inline bool plainEdges(const CUgraphEdgeData* edges, size_t n) {
  for (size_t i = 0; edges && i < n; ++i)
    if (edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || edges[i].from_port || edges[i].to_port) {
      GPOOL_LOG(Level::kWarn, "a graph edge of type %d from port %d (programmatic dependent launch) is not supported by gpool "
                "(returning CUDA_ERROR_NOT_SUPPORTED)", edges[i].type, edges[i].from_port);
      return false;
    }
  return true;
}

// A node's dependencies as the worker takes them.
inline proto::GraphNodes graphDeps(const CUgraphNode* d, size_t n) {
  proto::GraphNodes out;
  for (size_t i = 0; i < n && d; ++i) out.v.push_back(reinterpret_cast<uint64_t>(d[i]));
  return out;
}

// Makes sure the record of `node`, of `type`, holds the parameters its getter returns: a node a capture made
// has none until the worker is asked (captured_node_params.cpp). CUDA_ERROR_INVALID_VALUE for a node this
// process never saw or of another type.
CUresult knownParams(CUgraphNode node, CUgraphNodeType type);

// Graph memory nodes (api_graph_memory.cpp), for cuGraphAddNode too.
CUresult addMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUDA_MEM_ALLOC_NODE_PARAMS* p);
CUresult addMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, CUdeviceptr ptr);

// Batch memory-operation nodes (api_graph_memops.cpp), for the generic forms too. setBatchMemOpNode sets
// the graph's node when `exec` is null, else that instantiation's.
CUresult addBatchMemOpNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* d, size_t n, const CUDA_BATCH_MEM_OP_NODE_PARAMS* p);
CUresult setBatchMemOpNode(CUgraphExec exec, CUgraphNode node, const CUDA_BATCH_MEM_OP_NODE_PARAMS* p);
CUresult batchMemOpNodeParams(CUgraphNode node, CUDA_BATCH_MEM_OP_NODE_PARAMS* p);

}  // namespace gpool::client
