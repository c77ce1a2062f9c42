// Stream capture and CUDA graphs. A graph is captured on the worker, from the same ordered stream of
// calls the client sends, and lives there; the client holds its handle. While no capture is under way
// in this process (the usual case) capture-status queries are answered locally, with no round trip.
// Building graphs node by node is api_graph_build.cpp; questions about a graph's shape, api_graph_query.cpp.
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cross_device.h"
#include "graph_nodes.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {
uint64_t raw(const void* h) { return reinterpret_cast<uint64_t>(h); }

thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult beginCapture(uint64_t s, CUstreamCaptureMode mode) {
  if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, s);
  int st = conn->call<calls::StreamBeginCapture>(s, static_cast<uint32_t>(mode));
  if (st == CUDA_SUCCESS) ++State::get().active_captures;
  return static_cast<CUresult>(st);
}

CUresult beginCaptureToGraph(uint64_t s, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges, size_t n,
                             CUstreamCaptureMode mode) {
  if (!graph || (n && !deps) || mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  if (!plainEdges(edges, n)) return CUDA_ERROR_NOT_SUPPORTED;
  GPOOL_CONN_OF_HANDLE(conn, s);
  int st = conn->call<calls::StreamBeginCaptureToGraph>(s, raw(graph), graphDeps(deps, n), static_cast<uint32_t>(mode));
  if (st == CUDA_SUCCESS) ++State::get().active_captures;
  return static_cast<CUresult>(st);
}

// `graph` may be null (as the driver allows: a capture into a graph that exists hands back that graph).
CUresult endCapture(uint64_t s, CUgraph* graph) {
  GPOOL_CONN_OF_HANDLE(conn, s);
  calls::StreamEndCapture::out::tuple r;
  int st = conn->call<calls::StreamEndCapture>(r, s);
  // The capture is over whether it produced a graph or was invalidated; ILLEGAL_STATE: there was none.
  if (st != CUDA_ERROR_ILLEGAL_STATE && State::get().active_captures > 0) --State::get().active_captures;
  if (graph) *graph = st == CUDA_SUCCESS ? reinterpret_cast<CUgraph>(std::get<0>(r).v) : nullptr;
  return static_cast<CUresult>(st);
}

CUresult captureInfo(uint64_t s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  Connection* conn = State::get().ready(err);
  if (!conn) return err;
  if (State::get().active_captures == 0) {
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (id) *id = 0;
    return CUDA_SUCCESS;
  }
  std::tuple<uint32_t, uint64_t> r;
  int st = conn->call<calls::StreamCaptureInfo>(r, s);
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  *status = static_cast<CUstreamCaptureStatus>(std::get<0>(r));
  if (id) *id = std::get<1>(r);
  return CUDA_SUCCESS;
}

// The _v2/_v3 forms also report the capture's graph and the nodes the stream's next work will follow (NCCL
// adds nodes to the graph after them), asked of the worker. The arrays are this library's, per stream,
// and last until the next such question about the stream, as CUDA's do. Every edge is a plain one.
struct CaptureDeps {
  std::vector<CUgraphNode> nodes;
  std::vector<CUgraphEdgeData> edges;
};
std::mutex g_deps_mu;
std::unordered_map<uint64_t, CaptureDeps> g_deps;  // stream -> its latest answer

// The stream's capture; none (asked of no one) while this process has no capture under way.
CUresult captureState(Connection* conn, uint64_t s, gpool::proto::CaptureState& state) {
  state = gpool::proto::CaptureState{};
  if (State::get().active_captures == 0) return CUDA_SUCCESS;
  calls::StreamCaptureState::out::tuple r;
  int st = conn->call<calls::StreamCaptureState>(r, s);
  state = std::get<0>(r);
  return static_cast<CUresult>(st);
}

// The nodes a capture names, so later calls may name them (cuGraphNodeGetType, edges to them).
void rememberNodes(const gpool::proto::CaptureState& state) {
  if (state.types.size() != state.deps.v.size()) return;
  std::lock_guard lock(graphNodes().mu);
  for (size_t i = 0; i < state.deps.v.size(); ++i) {
    auto [it, fresh] = graphNodes().nodes.try_emplace(state.deps.v[i]);
    if (!fresh) continue;
    it->second.graph = state.graph.v;
    it->second.type = static_cast<CUgraphNodeType>(state.types[i]);
  }
}

CUresult captureInfoEx(uint64_t s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                       const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* ndeps) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, s);
  gpool::proto::CaptureState state;
  if (CUresult r = captureState(conn, s, state)) return r;
  *status = static_cast<CUstreamCaptureStatus>(state.status);
  if (id) *id = state.id;
  if (graph) *graph = reinterpret_cast<CUgraph>(state.graph.v);
  rememberNodes(state);
  std::lock_guard lock(g_deps_mu);
  CaptureDeps& kept = g_deps[s];
  kept.nodes.clear();
  for (uint64_t n : state.deps.v) kept.nodes.push_back(reinterpret_cast<CUgraphNode>(n));
  kept.edges.assign(kept.nodes.size(), CUgraphEdgeData{});
  if (deps) *deps = kept.nodes.empty() ? nullptr : kept.nodes.data();
  if (edges) *edges = kept.edges.empty() ? nullptr : kept.edges.data();
  if (ndeps) *ndeps = kept.nodes.size();
  return CUDA_SUCCESS;
}

// Sets or adds to the nodes a capturing stream's next work follows; they must be its capture graph's.
CUresult updateCaptureDeps(uint64_t s, CUgraphNode* deps, const CUgraphEdgeData* edges, size_t n, unsigned flags) {
  if ((n && !deps) || flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES) return CUDA_ERROR_INVALID_VALUE;
  if (!plainEdges(edges, n)) return CUDA_ERROR_NOT_SUPPORTED;
  GPOOL_CONN_OF_HANDLE(conn, s);
  gpool::proto::CaptureState state;
  if (CUresult r = captureState(conn, s, state)) return r;
  if (state.status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_ILLEGAL_STATE;
  return static_cast<CUresult>(conn->call<calls::StreamUpdateCaptureDeps>(s, state.graph.v, graphDeps(deps, n), uint32_t{flags}));
}

// Each instantiation's flags, which cuGraphExecGetFlags answers.
std::mutex g_exec_mu;
std::unordered_map<uint64_t, uint64_t> g_exec_flags;

CUresult instantiate(CUgraphExec* exec, CUgraph graph, uint64_t flags) {
  if (!exec || !graph) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  calls::GraphInstantiate::out::tuple r;
  int st = conn->call<calls::GraphInstantiate>(r, raw(graph), flags);
  *exec = st == CUDA_SUCCESS ? reinterpret_cast<CUgraphExec>(std::get<0>(r).v) : nullptr;
  if (st == CUDA_SUCCESS) {
    std::lock_guard lock(g_exec_mu);
    g_exec_flags[std::get<0>(r).v] = flags;
  }
  return static_cast<CUresult>(st);
}

// A graph is one device's here. In another device's stream (which CUDA allows) it runs after that stream's
// earlier work, on its own device, and is complete when this returns (so before the stream's later work);
// a capture under way keeps that stream's work from being waited for, and it is refused then.
CUresult graphLaunch(CUgraphExec exec, uint64_t s, bool upload) {
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(exec));
  bool async = true;
  if (State::get().active_captures == 0)
    if (CUresult r = onMemoryDevice(conn, s, async)) return r;
  if (!upload)
    if (CUresult r = managedBeforeDeviceWork()) return r;
  int st = upload ? conn->post<calls::GraphUpload>(raw(exec), s) : conn->post<calls::GraphLaunch>(raw(exec), s);
  if (st == CUDA_SUCCESS && !async) st = conn->call<calls::StreamSynchronize>(s);
  return static_cast<CUresult>(st);
}
}  // namespace

GPOOL_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  GPOOL_TRY return beginCapture(streamArg(s, false), mode); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  GPOOL_TRY return beginCapture(streamArg(s, true), mode); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamBeginCapture(CUstream s) {
  GPOOL_TRY return beginCapture(streamArg(s, false), CU_STREAM_CAPTURE_MODE_GLOBAL); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s) {
  GPOOL_TRY return beginCapture(streamArg(s, true), CU_STREAM_CAPTURE_MODE_GLOBAL); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                                                  size_t n, CUstreamCaptureMode mode) {
  GPOOL_TRY return beginCaptureToGraph(streamArg(s, false), graph, deps, edges, n, mode); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                                                       size_t n, CUstreamCaptureMode mode) {
  GPOOL_TRY return beginCaptureToGraph(streamArg(s, true), graph, deps, edges, n, mode); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph* graph) {
  GPOOL_TRY return endCapture(streamArg(s, false), graph); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* graph) {
  GPOOL_TRY return endCapture(streamArg(s, true), graph); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  GPOOL_TRY return captureInfo(streamArg(s, false), status, nullptr); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  GPOOL_TRY return captureInfo(streamArg(s, true), status, nullptr); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  GPOOL_TRY return captureInfo(streamArg(s, false), status, id); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  GPOOL_TRY return captureInfo(streamArg(s, true), status, id); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                                const CUgraphNode** deps, size_t* ndeps) {
  GPOOL_TRY return captureInfoEx(streamArg(s, false), status, id, graph, deps, nullptr, ndeps); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                     CUgraph* graph, const CUgraphNode** deps, size_t* ndeps) {
  GPOOL_TRY return captureInfoEx(streamArg(s, true), status, id, graph, deps, nullptr, ndeps); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                                const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* ndeps) {
  GPOOL_TRY return captureInfoEx(streamArg(s, false), status, id, graph, deps, edges, ndeps); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                     CUgraph* graph, const CUgraphNode** deps,
                                                     const CUgraphEdgeData** edges, size_t* ndeps) {
  GPOOL_TRY return captureInfoEx(streamArg(s, true), status, id, graph, deps, edges, ndeps); GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode* deps, size_t n, unsigned flags) {
  GPOOL_TRY return updateCaptureDeps(streamArg(s, false), deps, nullptr, n, flags); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode* deps, size_t n, unsigned flags) {
  GPOOL_TRY return updateCaptureDeps(streamArg(s, true), deps, nullptr, n, flags); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode* deps, const CUgraphEdgeData* edges, size_t n,
                                                          unsigned flags) {
  GPOOL_TRY return updateCaptureDeps(streamArg(s, false), deps, edges, n, flags); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode* deps, const CUgraphEdgeData* edges,
                                                               size_t n, unsigned flags) {
  GPOOL_TRY return updateCaptureDeps(streamArg(s, true), deps, edges, n, flags); GPOOL_CATCH
}

// The mode is per thread here; the worker executes on one thread and takes the mode of the latest call,
// which is exact for the usual single-threaded capture (PyTorch switches to relaxed around cudaMalloc).
GPOOL_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  GPOOL_TRY
  if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode previous = t_capture_mode;
  t_capture_mode = *mode;
  *mode = previous;
  if (t_capture_mode != previous) {
    CUresult err;
    if (Connection* conn = State::get().ready(err))
      return static_cast<CUresult>(conn->post<calls::ThreadCaptureMode>(static_cast<uint32_t>(t_capture_mode)));
  }
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  GPOOL_TRY return instantiate(exec, graph, flags); GPOOL_CATCH
}
// The CUDA 10 and 11 forms, for libraries built against them: no error node or log to report here.
namespace {
CUresult instantiateLegacy(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_size) {
  if (error_node) *error_node = nullptr;
  if (log && log_size) log[0] = '\0';
  return instantiate(exec, graph, 0);
}
}  // namespace
GPOOL_EXPORT CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_size) {
  GPOOL_TRY return instantiateLegacy(exec, graph, error_node, log, log_size); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_size) {
  GPOOL_TRY return instantiateLegacy(exec, graph, error_node, log, log_size); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  GPOOL_TRY
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  p->hErrNode_out = nullptr;
  CUresult r = instantiate(exec, graph, p->flags);
  p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  if (r == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD))
    r = graphLaunch(*exec, raw(p->hUploadStream), true);
  return r;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return cuGraphInstantiateWithParams(exec, graph, p);
}
GPOOL_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) { GPOOL_TRY return graphLaunch(exec, streamArg(s, false), false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) { GPOOL_TRY return graphLaunch(exec, streamArg(s, true), false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuGraphUpload(CUgraphExec exec, CUstream s) { GPOOL_TRY return graphLaunch(exec, streamArg(s, false), true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s) { GPOOL_TRY return graphLaunch(exec, streamArg(s, true), true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
  GPOOL_TRY
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(exec));
  {
    std::lock_guard lock(g_exec_mu);
    g_exec_flags.erase(raw(exec));
  }
  auto st = static_cast<CUresult>(conn->post<calls::GraphExecDestroy>(raw(exec)));
  if (st == CUDA_SUCCESS) st = settleGraphAllocations(conn);  // what only this instantiation held
  return st;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphExecGetFlags(CUgraphExec exec, cuuint64_t* flags) {
  GPOOL_TRY
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_exec_mu);
  auto it = g_exec_flags.find(raw(exec));
  if (it == g_exec_flags.end()) return CUDA_ERROR_INVALID_VALUE;
  *flags = it->second;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  GPOOL_TRY
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  graphNodes().forgetGraph(raw(graph));
  auto st = static_cast<CUresult>(conn->post<calls::GraphDestroy>(raw(graph)));
  if (st == CUDA_SUCCESS) st = settleGraphAllocations(conn);  // what only this graph held
  return st;
  GPOOL_CATCH
}
