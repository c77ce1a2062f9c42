// The sim backend's graph memory: allocation and free nodes, made explicitly or by capturing
// cuMemAllocAsync/cuMemFreeAsync. A node's address is host memory made with the node; a launch makes the
// allocation live and counts it against the device's graph reserve, which it grows as needed (a reserve
// CUDA would reuse across graphs); a free node, cuMemFreeAsync or cuMemFree ends it; a trim shrinks the
// reserve to what live allocations use. The worker charges the lease that reserve (graph_memory.h).
#include <cuda.h>

#include <algorithm>

#include "sim_backend.h"

namespace gpool::worker {

Status SimBackend::graphAllocate(uint64_t bytes, uint64_t& ptr) {
  NewAlloc made;
  if (Status st = MemAlloc(bytes, made); st != CUDA_SUCCESS) return st;  // host memory until the context ends
  ptr = made.ptr;
  graph_allocations_[ptr] = GraphAllocation{bytes, false};
  return CUDA_SUCCESS;
}

std::function<void()> SimBackend::graphAllocOp(uint64_t ptr) {
  return [this, ptr] {
    GraphAllocation& a = graph_allocations_.at(ptr);
    if (a.live) return;
    a.live = true;
    graph_used_ += a.bytes;
    graph_used_high_ = std::max(graph_used_high_, graph_used_);
    graph_reserved_ = std::max(graph_reserved_, graph_used_);
    graph_reserved_high_ = std::max(graph_reserved_high_, graph_reserved_);
  };
}

std::function<void()> SimBackend::graphFreeOp(uint64_t ptr) {
  return [this, ptr] {
    GraphAllocation& a = graph_allocations_.at(ptr);
    if (!a.live) return;
    a.live = false;
    graph_used_ -= a.bytes;
  };
}

Status SimBackend::captureAllocation(Capture& c, AllocBytes bytes, NewAlloc& out) {
  if (isBody(c.seq->graph)) return refuseInCapture(c, "a stream-ordered allocation into a conditional body");
  uint64_t ptr = 0;
  if (Status st = graphAllocate(bytes, ptr); st != CUDA_SUCCESS) return st;
  SimNode& node = nodes_[captureNode(c, graphAllocOp(ptr), CU_GRAPH_NODE_TYPE_MEM_ALLOC)];
  node.mem_ptr = ptr;
  node.mem_bytes = bytes.bytes;
  out = NewAlloc{ptr, bytes.bytes};
  return CUDA_SUCCESS;
}

Status SimBackend::streamFree(uint64_t ptr, uint64_t stream) {
  if (Capture* c = capturing(stream)) nodes_[captureNode(*c, graphFreeOp(ptr), CU_GRAPH_NODE_TYPE_MEM_FREE)].mem_ptr = ptr;
  else graphFreeOp(ptr)();
  return CUDA_SUCCESS;
}

bool SimBackend::isBody(uint64_t graph) const {
  for (const auto& [h, node] : nodes_)
    if (node.type == CU_GRAPH_NODE_TYPE_CONDITIONAL && std::count(node.bodies.begin(), node.bodies.end(), graph)) return true;
  return false;
}

bool SimBackend::hasMemoryNodes(uint64_t graph) const {
  auto it = graphs_.find(graph);
  if (it == graphs_.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(), [&](uint64_t n) {
    uint32_t type = nodes_.at(n).type;
    return type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || type == CU_GRAPH_NODE_TYPE_MEM_FREE;
  });
}

// As CUDA: memory nodes belong to a top-level graph, never to a conditional node's body.
Status SimBackend::GraphAddMemAllocNode(Graph g, GraphNodes deps, GraphAllocBytes bytes, Created<GraphNode>& out, GraphAlloc& made) {
  if (isBody(g.v)) return CUDA_ERROR_NOT_SUPPORTED;
  uint64_t ptr = 0;
  if (Status st = graphAllocate(bytes.bytes, ptr); st != CUDA_SUCCESS) return st;
  addNode(g, deps, graphAllocOp(ptr), out, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  nodes_[out.v].mem_ptr = ptr;
  nodes_[out.v].mem_bytes = bytes.bytes;
  made = GraphAlloc{ptr, bytes.bytes};
  return CUDA_SUCCESS;
}

Status SimBackend::GraphAddMemFreeNode(Graph g, GraphNodes deps, GraphFreed ptr, Created<GraphNode>& out) {
  if (isBody(g.v)) return CUDA_ERROR_NOT_SUPPORTED;
  if (!graph_allocations_.count(ptr.ptr)) return CUDA_ERROR_INVALID_VALUE;
  addNode(g, deps, graphFreeOp(ptr.ptr), out, CU_GRAPH_NODE_TYPE_MEM_FREE);
  nodes_[out.v].mem_ptr = ptr.ptr;
  return CUDA_SUCCESS;
}

Status SimBackend::GraphMemNodeGetParams(Graph, GraphNode node, uint64_t& ptr, uint64_t& bytes) {
  const SimNode& n = nodes_.at(node.v);
  if (n.type != CU_GRAPH_NODE_TYPE_MEM_ALLOC && n.type != CU_GRAPH_NODE_TYPE_MEM_FREE) return CUDA_ERROR_INVALID_VALUE;
  ptr = n.mem_ptr;
  bytes = n.mem_bytes;
  return CUDA_SUCCESS;
}

Status SimBackend::DeviceGraphMemTrim() {
  graph_reserved_ = graph_used_;
  return CUDA_SUCCESS;
}

Status SimBackend::DeviceGraphMemGet(std::vector<uint64_t>& figures) {
  figures = {graph_used_, graph_used_high_, graph_reserved_, graph_reserved_high_};
  return CUDA_SUCCESS;
}

Status SimBackend::DeviceGraphMemResetHigh(uint32_t attr) {
  if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) graph_used_high_ = graph_used_;
  else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) graph_reserved_high_ = graph_reserved_;
  else return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

uint64_t SimBackend::captureGraph(uint64_t stream) {
  Capture* c = capturing(stream);  // an invalidated capture still has its graph, until it ends
  return c ? c->seq->graph : 0;
}

void SimBackend::graphMemory(uint64_t& used, uint64_t& reserved) {
  used = graph_used_;
  reserved = graph_reserved_;
}

void SimBackend::clearGraphMemory() {
  graph_allocations_.clear();  // their host memory went with the context's allocations
  graph_used_ = graph_used_high_ = graph_reserved_ = graph_reserved_high_ = 0;
}

}  // namespace gpool::worker
