// The sim backend's CUDA graphs: built by stream capture or node by node, instantiated as their nodes'
// work in a topological order, and launched in stream order.
#include <cuda.h>

#include <cstring>
#include <unordered_map>

#include "sim_backend.h"

namespace gpool::worker {

bool SimBackend::topological(uint64_t graph, std::vector<uint64_t>& order) const {
  const std::vector<uint64_t>& nodes = graphs_.at(graph);
  std::unordered_map<uint64_t, size_t> waiting;  // node -> dependencies not yet placed
  std::unordered_map<uint64_t, std::vector<uint64_t>> after;
  for (uint64_t n : nodes) {
    waiting[n] = nodes_.at(n).deps.size();
    for (uint64_t d : nodes_.at(n).deps) after[d].push_back(n);
  }
  order.clear();
  for (uint64_t n : nodes)
    if (waiting[n] == 0) order.push_back(n);
  for (size_t i = 0; i < order.size(); ++i)
    for (uint64_t n : after[order[i]])
      if (--waiting[n] == 0) order.push_back(n);
  return order.size() == nodes.size();
}

Status SimBackend::addNode(uint64_t graph, const GraphNodes& deps, std::function<void()> op, Created<GraphNode>& out) {
  out = newHandle(HandleKind::kGraphNode);
  nodes_[out.v] = SimNode{std::move(op), deps.v, graph};
  graphs_[graph].push_back(out.v);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphCreate(uint32_t flags, Created<Graph>& out) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  out = newHandle(HandleKind::kGraph);
  graphs_[out.v];
  return CUDA_SUCCESS;
}

Status SimBackend::GraphAddEmptyNode(Graph g, GraphNodes deps, Created<GraphNode>& out) { return addNode(g, deps, [] {}, out); }

Status SimBackend::GraphAddKernelNode(Graph g, GraphNodes deps, KernelCall call, Created<GraphNode>& out) {
  std::function<void()> op;
  if (Status st = kernelOp(call, op); st != CUDA_SUCCESS) return st;
  return addNode(g, deps, std::move(op), out);
}

namespace {
// The work of memset, copy and host nodes, built once for a node and again when an instantiation's
// node gets new parameters.
std::function<void()> memsetOp(const DevFillRect& f, uint32_t value) {
  return [r = f.dst, elem = f.elem, value] {
    for (uint64_t y = 0; y < r.height; ++y) {
      auto* p = reinterpret_cast<uint8_t*>(r.ptr + y * r.pitch);
      for (uint64_t x = 0; x < r.width; x += elem) std::memcpy(p + x, &value, elem);
    }
  };
}
std::function<void()> memcpyOp(const DevCopyRect& c) {
  return [c] {
    for (uint64_t y = 0; y < c.dst.height; ++y)
      std::memmove(reinterpret_cast<void*>(c.dst.ptr + y * c.dst.pitch), reinterpret_cast<const void*>(c.src.ptr + y * c.src.pitch),
                   c.dst.width);
  };
}
}  // namespace

Status SimBackend::GraphAddMemsetNode(Graph g, GraphNodes deps, DevFillRect f, uint32_t value, Created<GraphNode>& out) {
  return addNode(g, deps, memsetOp(f, value), out);
}

Status SimBackend::GraphAddMemcpyNode(Graph g, GraphNodes deps, DevCopyRect c, Created<GraphNode>& out) {
  return addNode(g, deps, memcpyOp(c), out);
}

Status SimBackend::GraphAddHostNode(Graph g, GraphNodes deps, uint64_t id, Created<GraphNode>& out) {
  return addNode(g, deps, [this, id] { callbacks_.run(id); }, out);
}

Status SimBackend::GraphAddEventNode(Graph g, GraphNodes deps, Event e, uint32_t wait, Created<GraphNode>& out) {
  if (wait > 1) return CUDA_ERROR_INVALID_VALUE;
  if (wait) return addNode(g, deps, [] {}, out);  // work runs in order: the event has happened
  return addNode(g, deps, [this, e = e.v] {
    if (auto it = events_.find(e); it != events_.end()) {
      it->second.recorded = true;
      it->second.at = std::chrono::steady_clock::now();
    }
  }, out);
}

Status SimBackend::GraphAddChildGraphNode(Graph g, GraphNodes deps, ChildGraph child, Created<GraphNode>& out) {
  std::vector<uint64_t> order;  // the child is copied as it is now, as CUDA does
  if (child.v == g.v || !topological(child.v, order)) return CUDA_ERROR_INVALID_VALUE;
  Ops ops;
  for (uint64_t n : order) ops.push_back(nodes_.at(n).op);
  return addNode(g, deps, [ops]() mutable {
    for (auto& op : ops) op();
  }, out);
}

Status SimBackend::GraphAddDependencies(Graph, GraphNodes from, GraphNodes to) {
  if (from.v.size() != to.v.size()) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < from.v.size(); ++i) nodes_[to.v[i]].deps.push_back(from.v[i]);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphDestroyNode(Graph g, Released<GraphNode> node) {
  std::erase(graphs_[g.v], node.v);
  for (uint64_t n : graphs_[g.v]) std::erase(nodes_[n].deps, node.v);
  nodes_.erase(node.v);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphKernelNodeSetParams(Graph, GraphNode node, KernelCall call) {
  return kernelOp(call, nodes_[node.v].op);
}

std::function<void()>* SimBackend::execOp(uint64_t exec, uint64_t node) {
  SimExec& e = execs_[exec];
  for (size_t i = 0; i < e.nodes.size(); ++i)
    if (e.nodes[i] == node) return &e.ops[i];
  return nullptr;  // a node of the graph, not of this instantiation
}

Status SimBackend::GraphExecKernelNodeSetParams(GraphExec exec, Graph, GraphNode node, KernelCall call) {
  auto* op = execOp(exec.v, node.v);
  return op ? kernelOp(call, *op) : CUDA_ERROR_INVALID_VALUE;
}

Status SimBackend::GraphExecMemsetNodeSetParams(GraphExec exec, Graph, GraphNode node, DevFillRect f, uint32_t value) {
  auto* op = execOp(exec.v, node.v);
  if (!op) return CUDA_ERROR_INVALID_VALUE;
  *op = memsetOp(f, value);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphExecMemcpyNodeSetParams(GraphExec exec, Graph, GraphNode node, DevCopyRect c) {
  auto* op = execOp(exec.v, node.v);
  if (!op) return CUDA_ERROR_INVALID_VALUE;
  *op = memcpyOp(c);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphExecHostNodeSetParams(GraphExec exec, Graph, GraphNode node, uint64_t id) {
  auto* op = execOp(exec.v, node.v);
  if (!op) return CUDA_ERROR_INVALID_VALUE;
  *op = [this, id] { callbacks_.run(id); };
  return CUDA_SUCCESS;
}

Status SimBackend::GraphExecUpdate(GraphExec exec, Graph g, uint32_t& result) {
  std::vector<uint64_t> order;
  SimExec& e = execs_[exec.v];
  if (!topological(g.v, order) || order.size() != e.nodes.size()) {
    result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  e.nodes = order;
  e.ops.clear();
  for (uint64_t n : order) e.ops.push_back(nodes_.at(n).op);
  result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

Status SimBackend::GraphInstantiate(Graph graph, uint64_t, Created<GraphExec>& exec) {
  SimExec e;
  if (!topological(graph.v, e.nodes)) return CUDA_ERROR_INVALID_VALUE;  // a cycle
  for (uint64_t n : e.nodes) e.ops.push_back(nodes_.at(n).op);
  exec = newHandle(HandleKind::kGraphExec);
  execs_[exec.v] = std::move(e);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphLaunch(GraphExec exec, Stream stream) {
  issue(stream, [this, exec = exec.v] {
    if (auto e = execs_.find(exec); e != execs_.end())
      for (auto& op : e->second.ops) op();
  });
  return CUDA_SUCCESS;
}

Status SimBackend::GraphUpload(GraphExec, Stream) { return CUDA_SUCCESS; }

Status SimBackend::GraphExecDestroy(Released<GraphExec> exec) {
  execs_.erase(exec.v);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphDestroy(Released<Graph> graph) {
  for (uint64_t n : graphs_[graph.v]) nodes_.erase(n);
  graphs_.erase(graph.v);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphNodeCount(Graph graph, uint64_t& nodes) {
  nodes = graphs_[graph.v].size();
  return CUDA_SUCCESS;
}

}  // namespace gpool::worker
