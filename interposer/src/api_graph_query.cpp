// Questions about a graph's shape (its nodes, root nodes, edges, a node's dependencies and dependents),
// removing edges, clones and finding a node in a clone, and the DOT print. The shape is the worker's: each
// question fetches it whole in one round trip (GraphTopology), so an answer is never stale, and every node
// it names is recorded (graph_nodes.h), captured ones included, so later calls may name them.
#include <cstdio>
#include <vector>

#include "graph_nodes.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

uint64_t raw(const void* h) { return reinterpret_cast<uint64_t>(h); }

struct Topology {
  std::vector<uint64_t> nodes;
  std::vector<uint32_t> types;
  std::vector<uint64_t> edges;  // from, to pairs
};

CUresult topology(uint64_t graph, Topology& t) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, graph);
  calls::GraphTopology::out::tuple out;
  int st = conn->call<calls::GraphTopology>(out, graph);
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  t.nodes = std::move(std::get<0>(out).v);
  t.types = std::move(std::get<1>(out));
  t.edges = std::move(std::get<2>(out));
  if (t.types.size() != t.nodes.size() || t.edges.size() % 2 != 0) return CUDA_ERROR_UNKNOWN;
  std::lock_guard lock(graphNodes().mu);
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    auto [it, fresh] = graphNodes().nodes.try_emplace(t.nodes[i]);
    if (!fresh) continue;
    it->second.graph = graph;
    it->second.type = static_cast<CUgraphNodeType>(t.types[i]);
  }
  return CUDA_SUCCESS;
}

// As CUDA fills a node array: a null array asks for the count; otherwise up to *count entries are
// written, the rest of the array is cleared, and *count says how many there were.
CUresult fillNodes(const std::vector<uint64_t>& items, CUgraphNode* out, size_t* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (!out) {
    *count = items.size();
    return CUDA_SUCCESS;
  }
  size_t n = std::min(*count, items.size());
  for (size_t i = 0; i < *count; ++i) out[i] = i < n ? reinterpret_cast<CUgraphNode>(items[i]) : nullptr;
  *count = n;
  return CUDA_SUCCESS;
}

// Edges come in pairs (from, to); every edge is an ordinary one (gpool refuses the other kinds).
CUresult fillEdges(const std::vector<uint64_t>& edges, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* data, size_t* count) {
  if (!count || (!from != !to)) return CUDA_ERROR_INVALID_VALUE;
  size_t total = edges.size() / 2;
  if (!from) {
    *count = total;
    return CUDA_SUCCESS;
  }
  size_t n = std::min(*count, total);
  for (size_t i = 0; i < *count; ++i) {
    from[i] = i < n ? reinterpret_cast<CUgraphNode>(edges[2 * i]) : nullptr;
    to[i] = i < n ? reinterpret_cast<CUgraphNode>(edges[2 * i + 1]) : nullptr;
    if (data) data[i] = CUgraphEdgeData{};
  }
  *count = n;
  return CUDA_SUCCESS;
}

// A node's neighbours: its dependencies (edges into it) or its dependents (edges out of it).
CUresult neighbours(CUgraphNode node, bool dependents, CUgraphNode* out, CUgraphEdgeData* data, size_t* count) {
  uint64_t graph = 0;
  if (!graphNodes().graphOf(node, graph)) return CUDA_ERROR_INVALID_VALUE;
  Topology t;
  if (CUresult r = topology(graph, t)) return r;
  std::vector<uint64_t> found;
  for (size_t i = 0; i < t.edges.size(); i += 2)
    if (t.edges[dependents ? i : i + 1] == raw(node)) found.push_back(t.edges[dependents ? i + 1 : i]);
  if (data && out && count)
    for (size_t i = 0; i < *count; ++i) data[i] = CUgraphEdgeData{};
  return fillNodes(found, out, count);
}

CUresult rootNodes(CUgraph graph, CUgraphNode* out, size_t* count) {
  Topology t;
  if (CUresult r = topology(raw(graph), t)) return r;
  std::vector<uint64_t> roots;
  for (uint64_t n : t.nodes) {
    bool entered = false;
    for (size_t i = 1; i < t.edges.size() && !entered; i += 2) entered = t.edges[i] == n;
    if (!entered) roots.push_back(n);
  }
  return fillNodes(roots, out, count);
}

CUresult removeDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, const CUgraphEdgeData* data, size_t n) {
  if (n && (!from || !to)) return CUDA_ERROR_INVALID_VALUE;
  if (!plainEdges(data, n)) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  return static_cast<CUresult>(conn->call<calls::GraphRemoveDependencies>(raw(graph), gpool::proto::GraphEdges{graphDeps(from, n), graphDeps(to, n)}));
}

const char* typeName(uint32_t type) {
  static const char* const kNames[] = {"kernel", "memcpy", "memset", "host", "graph", "empty", "wait_event", "event_record",
                                       "ext_semas_signal", "ext_semas_wait", "mem_alloc", "mem_free", "batch_mem_op", "conditional"};
  return type < sizeof kNames / sizeof *kNames ? kNames[type] : "node";
}

}  // namespace

GPOOL_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  GPOOL_TRY
  if (!graph || !count) return CUDA_ERROR_INVALID_VALUE;
  if (!nodes) {  // the count alone (PyTorch warns about empty graphs): no node handles to record
    GPOOL_CONN_OF_HANDLE(conn, raw(graph));
    std::tuple<uint64_t> r;
    int st = conn->call<calls::GraphNodeCount>(r, raw(graph));
    if (st == CUDA_SUCCESS) *count = std::get<0>(r);
    return static_cast<CUresult>(st);
  }
  Topology t;
  if (CUresult r = topology(raw(graph), t)) return r;
  return fillNodes(t.nodes, nodes, count);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphGetRootNodes(CUgraph graph, CUgraphNode* roots, size_t* count) {
  GPOOL_TRY return count ? rootNodes(graph, roots, count) : CUDA_ERROR_INVALID_VALUE; GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphGetEdges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, size_t* count) {
  GPOOL_TRY
  Topology t;
  if (CUresult r = topology(raw(graph), t)) return r;
  return fillEdges(t.edges, from, to, nullptr, count);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphGetEdges_v2(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* data, size_t* count) {
  GPOOL_TRY
  Topology t;
  if (CUresult r = topology(raw(graph), t)) return r;
  return fillEdges(t.edges, from, to, data, count);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, size_t* count) {
  GPOOL_TRY return neighbours(node, false, deps, nullptr, count); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* data, size_t* count) {
  GPOOL_TRY return neighbours(node, false, deps, data, count); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* dependents, size_t* count) {
  GPOOL_TRY return neighbours(node, true, dependents, nullptr, count); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode* dependents, CUgraphEdgeData* data, size_t* count) {
  GPOOL_TRY return neighbours(node, true, dependents, data, count); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphRemoveDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, size_t n) {
  GPOOL_TRY return removeDependencies(graph, from, to, nullptr, n); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphRemoveDependencies_v2(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                                   const CUgraphEdgeData* data, size_t n) {
  GPOOL_TRY return removeDependencies(graph, from, to, data, n); GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGraphClone(CUgraph* clone, CUgraph original) {
  GPOOL_TRY
  if (!clone || !original) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(original));
  calls::GraphClone::out::tuple out;
  int st = conn->call<calls::GraphClone>(out, raw(original));
  *clone = st == CUDA_SUCCESS ? reinterpret_cast<CUgraph>(std::get<0>(out).v) : nullptr;
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}
// The clone's node takes the original's record (parameters included); a conditional node's bodies in the
// clone are not the original's, so they are not copied.
GPOOL_EXPORT CUresult cuGraphNodeFindInClone(CUgraphNode* found, CUgraphNode original, CUgraph clone) {
  GPOOL_TRY
  if (!found || !clone) return CUDA_ERROR_INVALID_VALUE;
  uint64_t graph = 0;
  if (!graphNodes().graphOf(original, graph)) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, graph);
  calls::GraphNodeFindInClone::out::tuple out;
  int st = conn->call<calls::GraphNodeFindInClone>(out, graph, raw(original), raw(clone));
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  *found = reinterpret_cast<CUgraphNode>(std::get<0>(out).v);
  std::lock_guard lock(graphNodes().mu);
  auto& nodes = graphNodes().nodes;
  if (auto it = nodes.find(raw(original)); it != nodes.end()) {
    GraphNodeInfo copy = it->second;
    copy.graph = raw(clone);
    copy.bodies.clear();
    nodes[raw(*found)] = std::move(copy);
  }
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// The graph a child-graph node embeds: the node's own (changing it changes the node), never destroyed by
// the program.
GPOOL_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* child) {
  GPOOL_TRY
  if (!child) return CUDA_ERROR_INVALID_VALUE;
  uint64_t graph = 0;
  if (!graphNodes().graphOf(node, graph)) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, graph);
  calls::GraphChildGraphNodeGetGraph::out::tuple out;
  int st = conn->call<calls::GraphChildGraphNodeGetGraph>(out, graph, raw(node));
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  if (std::get<0>(out).v.size() != 1) return CUDA_ERROR_UNKNOWN;
  *child = reinterpret_cast<CUgraph>(std::get<0>(out).v[0]);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// Written here from the worker's shape of the graph: nodes with their types, and edges.
GPOOL_EXPORT CUresult cuGraphDebugDotPrint(CUgraph graph, const char* path, unsigned int) {
  GPOOL_TRY
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  Topology t;
  if (CUresult r = topology(raw(graph), t)) return r;
  FILE* f = std::fopen(path, "w");
  if (!f) return CUDA_ERROR_OPERATING_SYSTEM;
  std::fprintf(f, "digraph gpool_graph_%llx {\n", static_cast<unsigned long long>(raw(graph)));
  for (size_t i = 0; i < t.nodes.size(); ++i)
    std::fprintf(f, "  n%llx [label=\"%s\"];\n", static_cast<unsigned long long>(t.nodes[i]), typeName(t.types[i]));
  for (size_t i = 0; i < t.edges.size(); i += 2)
    std::fprintf(f, "  n%llx -> n%llx;\n", static_cast<unsigned long long>(t.edges[i]), static_cast<unsigned long long>(t.edges[i + 1]));
  std::fprintf(f, "}\n");
  return std::fclose(f) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
  GPOOL_CATCH
}
