// The sim backend's CUDA graphs: built by stream capture or node by node, instantiated as their nodes'
// work in a topological order, and launched in stream order. Conditional nodes run their bodies as the
// condition a kernel set says (IF, WHILE, SWITCH), checked on this thread as the device would.
#include <cuda.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "sim_backend.h"

namespace gpool::worker {

namespace {
constexpr uint32_t kMaxSwitchBodies = 4096;  // a SWITCH node's bodies; a bound on what one request makes

void runAll(const std::vector<std::function<void()>>& ops) {
  for (const auto& op : ops) op();
}
}  // namespace

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

std::vector<std::shared_ptr<SimBackend::SimConditional>> SimBackend::resetsOf(uint64_t graph) const {
  std::vector<std::shared_ptr<SimConditional>> out;
  for (const auto& [h, c] : conditionals_)
    if (c->graph == graph && (c->flags & CU_GRAPH_COND_ASSIGN_DEFAULT)) out.push_back(c);
  return out;
}

std::function<void()> SimBackend::conditionalOp(const SimNode& node) {
  std::vector<Ops> bodies(node.bodies.size());
  for (size_t i = 0; i < bodies.size(); ++i) {
    std::vector<uint64_t> order;
    if (!graphOps(node.bodies[i], order, bodies[i])) return nullptr;
    if (auto resets = resetsOf(node.bodies[i]); !resets.empty())  // a body's own handles, each time it runs
      bodies[i].insert(bodies[i].begin(), [resets] { for (auto& c : resets) c->value = c->initial; });
  }
  std::shared_ptr<SimConditional> c = conditionals_.at(node.condition);
  switch (node.cond_type) {
    case CU_GRAPH_COND_TYPE_IF:
      return [c, bodies] {
        if (c->value) runAll(bodies[0]);
        else if (bodies.size() > 1) runAll(bodies[1]);
      };
    case CU_GRAPH_COND_TYPE_WHILE:
      return [c, bodies] {
        while (c->value) runAll(bodies[0]);
      };
    default:  // SWITCH
      return [c, bodies] {
        if (c->value < bodies.size()) runAll(bodies[c->value]);
      };
  }
}

// A child-graph node's work: its embedded graph's, as that graph is now.
std::function<void()> SimBackend::childOp(const SimNode& node) {
  std::vector<uint64_t> order;
  Ops ops;
  if (!graphOps(node.bodies[0], order, ops)) return nullptr;
  return [ops] { runAll(ops); };
}

bool SimBackend::graphOps(uint64_t graph, std::vector<uint64_t>& order, Ops& ops) {
  if (!topological(graph, order)) return false;  // a cycle
  ops.clear();
  for (uint64_t n : order) {
    const SimNode& node = nodes_.at(n);
    if (node.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) ops.push_back(conditionalOp(node));
    else if (node.type == CU_GRAPH_NODE_TYPE_GRAPH && !node.bodies.empty()) ops.push_back(childOp(node));
    else ops.push_back(node.op);  // a captured graph launch is plain work
    if (!ops.back()) return false;
  }
  return true;
}

// A deep copy of a graph: its nodes, with their edges, and the graphs embedded in child and conditional
// nodes (a conditional copy keeps its handle). `copies` maps each original node to its copy.
uint64_t SimBackend::cloneGraph(uint64_t graph, std::unordered_map<uint64_t, uint64_t>& copies) {
  uint64_t clone = newHandle(HandleKind::kGraph);
  std::vector<uint64_t> originals = graphs_[graph];
  for (uint64_t n : originals) copies[n] = newHandle(HandleKind::kGraphNode);
  for (uint64_t n : originals) {
    SimNode copy = nodes_.at(n);
    copy.graph = clone;
    copy.origin = n;
    for (uint64_t& d : copy.deps) d = copies.at(d);
    for (uint64_t& body : copy.bodies) {
      std::unordered_map<uint64_t, uint64_t> inner;
      body = cloneGraph(body, inner);
    }
    nodes_[copies[n]] = std::move(copy);
    graphs_[clone].push_back(copies[n]);
  }
  return clone;
}

void SimBackend::setConditional(void* sim, unsigned long long handle, unsigned value) {
  auto& conditionals = static_cast<SimBackend*>(sim)->conditionals_;
  if (auto it = conditionals.find(handle); it != conditionals.end()) it->second->value = value;
}

Status SimBackend::addNode(uint64_t graph, const GraphNodes& deps, std::function<void()> op, Created<GraphNode>& out,
                           uint32_t type, SimNodeParams params) {
  out = newHandle(HandleKind::kGraphNode);
  nodes_[out.v] = SimNode{std::move(op), deps.v, graph, type};
  nodes_[out.v].params = std::move(params);
  graphs_[graph].push_back(out.v);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphCreate(uint32_t flags, Created<Graph>& out) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  out = newHandle(HandleKind::kGraph);
  graphs_[out.v];
  return CUDA_SUCCESS;
}

Status SimBackend::GraphAddEmptyNode(Graph g, GraphNodes deps, Created<GraphNode>& out) {
  return addNode(g, deps, [] {}, out, CU_GRAPH_NODE_TYPE_EMPTY);
}

Status SimBackend::GraphAddKernelNode(Graph g, GraphNodes deps, KernelCall call, Created<GraphNode>& out) {
  std::function<void()> op;
  if (Status st = kernelOp(call, op); st != CUDA_SUCCESS) return st;
  return addNode(g, deps, std::move(op), out, CU_GRAPH_NODE_TYPE_KERNEL, kernelParams(call));
}

namespace {
uint32_t eventType(uint32_t wait) { return wait ? CU_GRAPH_NODE_TYPE_WAIT_EVENT : CU_GRAPH_NODE_TYPE_EVENT_RECORD; }
}  // namespace

std::function<void()> SimBackend::eventOp(uint64_t event, uint32_t wait) {
  if (wait) return [] {};  // work runs in order: the event has happened
  return [this, event] {
    if (auto it = events_.find(event); it != events_.end()) {
      it->second.recorded = true;
      it->second.at = std::chrono::steady_clock::now();
    }
  };
}

Status SimBackend::GraphAddMemsetNode(Graph g, GraphNodes deps, DevFillRect f, uint32_t value, Created<GraphNode>& out) {
  return addNode(g, deps, fillOp(f, value), out, CU_GRAPH_NODE_TYPE_MEMSET, fillParams(f, value));
}

Status SimBackend::GraphAddBatchMemOpNode(Graph g, GraphNodes deps, MemOps m, Created<GraphNode>& out) {
  return addNode(g, deps, memOpsOp(m), out, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
}

Status SimBackend::GraphAddMemcpyNode(Graph g, GraphNodes deps, DevCopyRect c, Created<GraphNode>& out) {
  return addNode(g, deps, copyOp(c), out, CU_GRAPH_NODE_TYPE_MEMCPY, copyParams(c));
}

// A copy between the client's rows and the device (HostCopyCapture, GraphAddHostCopyNode): the rows move
// on the host-function channel through a staging buffer the op keeps.
std::function<void()> SimBackend::hostCopyOp(const HostRowsCopy& c, uint64_t id) {
  auto rows = std::make_shared<std::vector<uint8_t>>(c.bytes());
  return [this, rows, c, id] {
    const DevRect& device = c.device;
    if (c.toDevice() && !callbacks_.fetch(id, rows->data(), rows->size())) return;
    if (!reachable(device.ptr, device.span())) return;
    for (uint64_t y = 0; y < device.height; ++y) {
      auto* at = reinterpret_cast<uint8_t*>(device.ptr + y * device.pitch);
      uint8_t* staged = rows->data() + y * device.width;
      if (c.toDevice()) std::memcpy(at, staged, device.width);
      else std::memcpy(staged, at, device.width);
    }
    if (!c.toDevice()) callbacks_.deliver(id, rows->data(), rows->size());
  };
}

Status SimBackend::GraphAddHostCopyNode(Graph g, GraphNodes deps, HostRowsCopy copy, uint64_t id, Created<GraphNode>& out) {
  return addNode(g, deps, hostCopyOp(copy, id), out, CU_GRAPH_NODE_TYPE_MEMCPY);
}

Status SimBackend::GraphAddHostNode(Graph g, GraphNodes deps, uint64_t id, Created<GraphNode>& out) {
  return addNode(g, deps, [this, id] { callbacks_.run(id); }, out, CU_GRAPH_NODE_TYPE_HOST, hostParams(id));
}

Status SimBackend::GraphAddEventNode(Graph g, GraphNodes deps, Event e, uint32_t wait, Created<GraphNode>& out) {
  if (wait > 1) return CUDA_ERROR_INVALID_VALUE;
  return addNode(g, deps, eventOp(e.v, wait), out, eventType(wait), eventParams(e.v));
}

Status SimBackend::GraphAddChildGraphNode(Graph g, GraphNodes deps, ChildGraph child, Created<GraphNode>& out) {
  std::vector<uint64_t> order;  // the child is copied as it is now, as CUDA does; the node owns the copy
  if (child.v == g.v || !topological(child.v, order)) return CUDA_ERROR_INVALID_VALUE;
  if (hasMemoryNodes(child.v)) return CUDA_ERROR_NOT_SUPPORTED;  // as CUDA: a child graph holds no memory nodes
  std::unordered_map<uint64_t, uint64_t> copies;
  uint64_t embedded = cloneGraph(child.v, copies);
  addNode(g, deps, nullptr, out, CU_GRAPH_NODE_TYPE_GRAPH);
  nodes_[out.v].bodies = {embedded};
  return CUDA_SUCCESS;
}

Status SimBackend::GraphChildGraphNodeGetGraph(Graph, GraphNode node, Created<BodyGraphs>& graph) {
  const SimNode& n = nodes_.at(node.v);
  if (n.type != CU_GRAPH_NODE_TYPE_GRAPH || n.bodies.empty()) return CUDA_ERROR_INVALID_VALUE;
  graph.v = n.bodies;
  return CUDA_SUCCESS;
}

Status SimBackend::GraphConditionalHandleCreate(Graph g, uint32_t initial, uint32_t flags, Created<Conditional>& out) {
  if (flags & ~uint32_t{CU_GRAPH_COND_ASSIGN_DEFAULT}) return CUDA_ERROR_INVALID_VALUE;
  out = newHandle(HandleKind::kConditional);
  // Kept until the context ends: an instantiation's kernels may set it after its graph is gone.
  conditionals_[out.v] = std::make_shared<SimConditional>(SimConditional{initial, initial, flags, g.v});
  return CUDA_SUCCESS;
}

Status SimBackend::GraphAddConditionalNode(Graph g, GraphNodes deps, Conditional c, uint32_t type, uint32_t size,
                                           Created<GraphNode>& out, Created<BodyGraphs>& bodies) {
  bool fits = (type == CU_GRAPH_COND_TYPE_IF && (size == 1 || size == 2)) || (type == CU_GRAPH_COND_TYPE_WHILE && size == 1) ||
              (type == CU_GRAPH_COND_TYPE_SWITCH && size >= 1 && size <= kMaxSwitchBodies);
  if (!fits) return CUDA_ERROR_INVALID_VALUE;
  for (uint32_t i = 0; i < size; ++i) {
    bodies.v.push_back(newHandle(HandleKind::kGraph));
    graphs_[bodies.v.back()];
  }
  addNode(g, deps, nullptr, out, CU_GRAPH_NODE_TYPE_CONDITIONAL);
  SimNode& node = nodes_[out.v];
  node.condition = c.v;
  node.cond_type = type;
  node.bodies = bodies.v;
  return CUDA_SUCCESS;
}

Status SimBackend::GraphAddDependencies(Graph, GraphEdges e) {
  const auto& from = e.from;
  const auto& to = e.to;
  for (size_t i = 0; i < from.v.size(); ++i) nodes_[to.v[i]].deps.push_back(from.v[i]);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphRemoveDependencies(Graph, GraphEdges e) {
  const auto& from = e.from;
  const auto& to = e.to;
  for (size_t i = 0; i < from.v.size(); ++i)  // every edge must exist; then all go
    if (std::find(nodes_[to.v[i]].deps.begin(), nodes_[to.v[i]].deps.end(), from.v[i]) == nodes_[to.v[i]].deps.end())
      return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < from.v.size(); ++i) std::erase(nodes_[to.v[i]].deps, from.v[i]);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphTopology(Graph g, Created<GraphNodes>& nodes, std::vector<uint32_t>& types, std::vector<uint64_t>& edges) {
  nodes.v = graphs_[g.v];
  for (uint64_t n : nodes.v) {
    const SimNode& node = nodes_.at(n);
    types.push_back(node.type);
    for (uint64_t d : node.deps) {
      edges.push_back(d);
      edges.push_back(n);
    }
  }
  return CUDA_SUCCESS;
}

Status SimBackend::GraphClone(Graph g, Created<Graph>& out) {
  std::unordered_map<uint64_t, uint64_t> copies;
  out = cloneGraph(g.v, copies);
  copyObjectRefs(g.v, out.v);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphNodeFindInClone(Graph, GraphNode node, Graph clone, Created<GraphNode>& out) {
  for (uint64_t n : graphs_[clone.v])
    if (nodes_.at(n).origin == node.v) {
      out = n;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;  // not a clone of that node's graph
}

void SimBackend::destroyGraph(uint64_t graph) {
  releaseObjectRefs(graph);
  for (uint64_t n : graphs_[graph]) {
    for (uint64_t body : nodes_[n].bodies) destroyGraph(body);
    nodes_.erase(n);
  }
  graphs_.erase(graph);
}

Status SimBackend::GraphDestroyNode(Graph g, Released<GraphNode> node) {
  std::erase(graphs_[g.v], node.v);
  for (uint64_t n : graphs_[g.v]) std::erase(nodes_[n].deps, node.v);
  for (uint64_t body : nodes_[node.v].bodies) destroyGraph(body);
  nodes_.erase(node.v);
  return CUDA_SUCCESS;
}

// Setters and getters on the graph's own node: the node must be of their type, as the driver checks.
SimBackend::SimNode* SimBackend::nodeOf(uint64_t node, uint32_t type) {
  SimNode& n = nodes_.at(node);
  return n.type == type ? &n : nullptr;
}

Status SimBackend::GraphKernelNodeSetParams(Graph, GraphNode node, KernelCall call) {
  SimNode* n = nodeOf(node.v, CU_GRAPH_NODE_TYPE_KERNEL);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  if (Status st = kernelOp(call, n->op); st != CUDA_SUCCESS) return st;
  n->params = kernelParams(call);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphMemsetNodeSetParams(Graph, GraphNode node, DevFillRect f, uint32_t value) {
  SimNode* n = nodeOf(node.v, CU_GRAPH_NODE_TYPE_MEMSET);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  n->op = fillOp(f, value);
  n->params = fillParams(f, value);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphBatchMemOpNodeSetParams(Graph, GraphNode node, MemOps m) {
  SimNode* n = nodeOf(node.v, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  n->op = memOpsOp(m);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphMemcpyNodeSetParams(Graph, GraphNode node, DevCopyRect c) {
  SimNode* n = nodeOf(node.v, CU_GRAPH_NODE_TYPE_MEMCPY);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  n->op = copyOp(c);
  n->params = copyParams(c);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphHostNodeSetParams(Graph, GraphNode node, uint64_t id) {
  SimNode* n = nodeOf(node.v, CU_GRAPH_NODE_TYPE_HOST);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  n->op = [this, id] { callbacks_.run(id); };
  n->params = hostParams(id);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphEventNodeSetEvent(Graph, GraphNode node, Event e, uint32_t wait) {
  SimNode* n = wait > 1 ? nullptr : nodeOf(node.v, eventType(wait));
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  n->op = eventOp(e.v, wait);
  n->params = eventParams(e.v);
  return CUDA_SUCCESS;
}

// A node's parameters as the driver's getters give them (a node of another type: CUDA_ERROR_INVALID_VALUE).
Status SimBackend::GraphKernelNodeGetParams(Graph, GraphNode node, Launchable& f, uint32_t& is_kernel, std::vector<uint32_t>& shape,
                                            std::vector<uint8_t>& args) {
  const SimNode* n = nodeOf(node.v, CU_GRAPH_NODE_TYPE_KERNEL);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  f = n->params.f, shape = n->params.shape, args = n->params.args;
  auto it = functions_.find(f);
  is_kernel = it != functions_.end() && !it->second.from_module;
  return CUDA_SUCCESS;
}

Status SimBackend::GraphMemsetNodeGetParams(Graph, GraphNode node, DevFillRect& f, uint32_t& value) {
  const SimNode* n = nodeOf(node.v, CU_GRAPH_NODE_TYPE_MEMSET);
  if (!n || !n->params.fill) return CUDA_ERROR_INVALID_VALUE;
  f = *n->params.fill, value = n->params.value;
  return CUDA_SUCCESS;
}

Status SimBackend::GraphMemcpyNodeGetParams(Graph, GraphNode node, DevCopyRect& c) {
  const SimNode* n = nodeOf(node.v, CU_GRAPH_NODE_TYPE_MEMCPY);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  if (!n->params.copy) return CUDA_ERROR_NOT_SUPPORTED;  // a host copy's node: through a staging buffer, as on a GPU
  c = *n->params.copy;
  return CUDA_SUCCESS;
}

Status SimBackend::GraphHostNodeGetParams(Graph, GraphNode node, uint64_t& id) {
  const SimNode* n = nodeOf(node.v, CU_GRAPH_NODE_TYPE_HOST);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  if (!n->params.host) return CUDA_ERROR_NOT_SUPPORTED;
  id = n->params.host;
  return CUDA_SUCCESS;
}

Status SimBackend::GraphEventNodeGetEvent(Graph, GraphNode node, uint32_t wait, Event& out) {
  const SimNode* n = wait > 1 ? nullptr : nodeOf(node.v, eventType(wait));
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  out = n->params.event;
  return CUDA_SUCCESS;
}

// Kernel node attributes: kept with the node (the sim backend runs every kernel the same way); one not
// set reads as zeros, as the driver's defaults do.
Status SimBackend::GraphKernelNodeSetAttribute(Graph, GraphNode node, LaunchAttrs attr) {
  SimNode& n = nodes_.at(node.v);
  if (n.type != CU_GRAPH_NODE_TYPE_KERNEL || attr.data.size != sizeof(CUlaunchAttribute)) return CUDA_ERROR_INVALID_VALUE;
  CUlaunchAttribute a;
  std::memcpy(&a, attr.data.data, sizeof a);
  const auto* value = reinterpret_cast<const uint8_t*>(&a.value);
  n.attributes[a.id] = std::vector<uint8_t>(value, value + sizeof a.value);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphKernelNodeGetAttribute(Graph, GraphNode node, uint32_t id, std::vector<uint8_t>& value) {
  const SimNode& n = nodes_.at(node.v);
  if (n.type != CU_GRAPH_NODE_TYPE_KERNEL || id == CU_LAUNCH_ATTRIBUTE_IGNORE || id > CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING)
    return CUDA_ERROR_INVALID_VALUE;
  auto it = n.attributes.find(id);
  value = it != n.attributes.end() ? it->second : std::vector<uint8_t>(sizeof(CUlaunchAttributeValue), 0);
  return CUDA_SUCCESS;
}

// A stream's attributes, kept as set (none set reads as zeros, as for a graph's kernel node).
Status SimBackend::StreamSetAttribute(Stream stream, LaunchAttrs attr) {
  if (attr.data.size != sizeof(CUlaunchAttribute)) return CUDA_ERROR_INVALID_VALUE;
  CUlaunchAttribute a;
  std::memcpy(&a, attr.data.data, sizeof a);
  const auto* value = reinterpret_cast<const uint8_t*>(&a.value);
  stream_attributes_[stream.v][a.id] = std::vector<uint8_t>(value, value + sizeof a.value);
  return CUDA_SUCCESS;
}

Status SimBackend::StreamGetAttribute(Stream stream, uint32_t id, std::vector<uint8_t>& value) {
  if (id == CU_LAUNCH_ATTRIBUTE_IGNORE || id > CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING) return CUDA_ERROR_INVALID_VALUE;
  const auto& set = stream_attributes_[stream.v];
  auto it = set.find(id);
  value = it != set.end() ? it->second : std::vector<uint8_t>(sizeof(CUlaunchAttributeValue), 0);
  return CUDA_SUCCESS;
}

Status SimBackend::StreamCopyAttributes(Stream dst, Stream src) {
  stream_attributes_[dst.v] = stream_attributes_[src.v];
  return CUDA_SUCCESS;
}

Status SimBackend::GraphKernelNodeCopyAttributes(Graph, GraphNode dst, Graph, GraphNode src) {
  SimNode& to = nodes_.at(dst.v);
  const SimNode& from = nodes_.at(src.v);
  if (to.type != CU_GRAPH_NODE_TYPE_KERNEL || from.type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  to.attributes = from.attributes;
  return CUDA_SUCCESS;
}

// Setters on an instantiation's node: the node must be in it, and of the setter's type.
int SimBackend::execIndex(uint64_t exec, uint64_t node) {
  SimExec& e = execs_[exec];
  for (size_t i = 0; i < e.nodes.size(); ++i)
    if (e.nodes[i] == node) return static_cast<int>(i);
  return -1;  // a node of the graph, not of this instantiation
}

std::function<void()>* SimBackend::execOp(uint64_t exec, uint64_t node, uint32_t type) {
  int i = execIndex(exec, node);
  if (i < 0 || execs_[exec].types[i] != type) return nullptr;
  return &execs_[exec].ops[i];
}

Status SimBackend::GraphExecKernelNodeSetParams(GraphExec exec, Graph, GraphNode node, KernelCall call) {
  auto* op = execOp(exec.v, node.v, CU_GRAPH_NODE_TYPE_KERNEL);
  return op ? kernelOp(call, *op) : CUDA_ERROR_INVALID_VALUE;
}

Status SimBackend::GraphExecMemsetNodeSetParams(GraphExec exec, Graph, GraphNode node, DevFillRect f, uint32_t value) {
  auto* op = execOp(exec.v, node.v, CU_GRAPH_NODE_TYPE_MEMSET);
  if (!op) return CUDA_ERROR_INVALID_VALUE;
  *op = fillOp(f, value);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphExecBatchMemOpNodeSetParams(GraphExec exec, Graph, GraphNode node, MemOps m) {
  auto* op = execOp(exec.v, node.v, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  if (!op) return CUDA_ERROR_INVALID_VALUE;
  *op = memOpsOp(m);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphExecMemcpyNodeSetParams(GraphExec exec, Graph, GraphNode node, DevCopyRect c) {
  auto* op = execOp(exec.v, node.v, CU_GRAPH_NODE_TYPE_MEMCPY);
  if (!op) return CUDA_ERROR_INVALID_VALUE;
  *op = copyOp(c);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphExecHostNodeSetParams(GraphExec exec, Graph, GraphNode node, uint64_t id) {
  auto* op = execOp(exec.v, node.v, CU_GRAPH_NODE_TYPE_HOST);
  if (!op) return CUDA_ERROR_INVALID_VALUE;
  *op = [this, id] { callbacks_.run(id); };
  return CUDA_SUCCESS;
}

Status SimBackend::GraphExecEventNodeSetEvent(GraphExec exec, Graph, GraphNode node, Event e, uint32_t wait) {
  auto* op = wait > 1 ? nullptr : execOp(exec.v, node.v, eventType(wait));
  if (!op) return CUDA_ERROR_INVALID_VALUE;
  *op = eventOp(e.v, wait);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphExecChildGraphNodeSetParams(GraphExec exec, Graph, GraphNode node, ChildGraph child) {
  auto* op = execOp(exec.v, node.v, CU_GRAPH_NODE_TYPE_GRAPH);
  std::vector<uint64_t> order;
  Ops ops;
  if (!op || !graphOps(child.v, order, ops)) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t embedded = nodes_.at(node.v).bodies.at(0);
  if (order.size() != graphs_[embedded].size()) return CUDA_ERROR_INVALID_VALUE;  // another topology
  // The same node types, as the driver requires (a memset in a kernel's place is refused: seen on an H200).
  auto types = [this](uint64_t graph) {
    std::vector<uint32_t> t;
    for (uint64_t id : graphs_[graph]) t.push_back(nodes_.at(id).type);
    std::sort(t.begin(), t.end());
    return t;
  };
  if (types(embedded) != types(child.v)) return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  *op = [ops] { runAll(ops); };
  return CUDA_SUCCESS;
}

// An instantiation's switch for a node; only kernel, memset and memcpy nodes have one, as in CUDA.
char* SimBackend::enabledFlag(uint64_t exec, uint64_t node) {
  int i = execIndex(exec, node);
  if (i < 0 || execs_[exec].types[i] > CU_GRAPH_NODE_TYPE_MEMSET) return nullptr;
  return &execs_[exec].enabled[i];
}

Status SimBackend::GraphExecNodeSetEnabled(GraphExec exec, Graph, GraphNode node, uint32_t enabled) {
  char* flag = enabledFlag(exec.v, node.v);
  if (!flag) return CUDA_ERROR_INVALID_VALUE;
  *flag = enabled != 0;
  return CUDA_SUCCESS;
}

Status SimBackend::GraphExecNodeGetEnabled(GraphExec exec, Graph, GraphNode node, uint32_t& enabled) {
  const char* flag = enabledFlag(exec.v, node.v);
  if (!flag) return CUDA_ERROR_INVALID_VALUE;
  enabled = *flag;
  return CUDA_SUCCESS;
}

// An instantiation: the graph's work now, every node enabled, and the conditions to reset per launch.
bool SimBackend::instantiate(uint64_t graph, SimExec& e) {
  if (!graphOps(graph, e.nodes, e.ops)) return false;
  e.types.clear();
  for (uint64_t n : e.nodes) e.types.push_back(nodes_.at(n).type);
  e.enabled.assign(e.nodes.size(), 1);
  e.resets = resetsOf(graph);
  return true;
}

Status SimBackend::GraphExecUpdate(GraphExec exec, Graph g, uint32_t& result) {
  std::vector<uint64_t> order;
  SimExec& e = execs_[exec.v];
  SimExec updated;
  if (!topological(g.v, order) || order.size() != e.nodes.size() || !instantiate(g.v, updated)) {
    result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  e = std::move(updated);
  releaseObjectRefs(exec.v);  // as CUDA: the instantiation now holds the new graph's references
  copyObjectRefs(g.v, exec.v);
  result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

Status SimBackend::GraphInstantiate(Graph graph, uint64_t, Created<GraphExec>& exec) {
  SimExec e;
  if (!instantiate(graph.v, e)) return CUDA_ERROR_INVALID_VALUE;  // a cycle
  exec = newHandle(HandleKind::kGraphExec);
  execs_[exec.v] = std::move(e);
  copyObjectRefs(graph.v, exec.v);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphLaunch(GraphExec exec, Stream stream) {
  fault_ = CUDA_SUCCESS;
  issue(stream, [this, exec = exec.v] {
    auto e = execs_.find(exec);
    if (e == execs_.end()) return;
    for (auto& c : e->second.resets) c->value = c->initial;
    for (size_t i = 0; i < e->second.ops.size(); ++i)
      if (e->second.enabled[i]) e->second.ops[i]();
  }, CU_GRAPH_NODE_TYPE_GRAPH);
  return std::exchange(fault_, CUDA_SUCCESS);  // work touching memory no longer the client's
}

Status SimBackend::GraphUpload(GraphExec, Stream) { return CUDA_SUCCESS; }

Status SimBackend::GraphExecDestroy(Released<GraphExec> exec) {
  execs_.erase(exec.v);
  releaseObjectRefs(exec.v);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphDestroy(Released<Graph> graph) {
  destroyGraph(graph.v);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphNodeCount(Graph graph, uint64_t& nodes) {
  nodes = graphs_[graph.v].size();
  return CUDA_SUCCESS;
}

}  // namespace gpool::worker
