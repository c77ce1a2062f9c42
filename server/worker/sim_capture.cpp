// The sim backend's stream capture, as CUDA defines it: the capture's graph gets a node for each operation
// as it is issued, after the issuing stream's open dependencies. An event recorded inside a capture holds
// the recording stream's dependencies; a stream that waits on it joins the capture (or, inside it, adds
// them to its own). The capture ends on the stream that began it, once every stream that joined has joined
// back (its last nodes are among what the origin's follow).
#include <cuda.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_set>

#include "sim_backend.h"

namespace gpool::worker {

SimBackend::Capture* SimBackend::capturing(uint64_t stream) {
  auto it = captures_.find(stream);
  return it == captures_.end() ? nullptr : &it->second;
}

uint64_t SimBackend::captureNode(Capture& c, std::function<void()> op, uint32_t type, SimNodeParams params) {
  uint64_t node = newHandle(HandleKind::kGraphNode);
  nodes_[node] = SimNode{std::move(op), c.after, c.seq->graph, type};
  nodes_[node].params = std::move(params);
  graphs_[c.seq->graph].push_back(node);
  c.after = {node};
  return node;
}

void SimBackend::issue(uint64_t stream, std::function<void()> op, uint32_t type, SimNodeParams params) {
  if (Capture* c = capturing(stream)) captureNode(*c, std::move(op), type, std::move(params));
  else op();
}

Status SimBackend::refuseInCapture(Capture& c, const char* what) {
  // As the driver does: the operation fails and the capture can only end invalidated.
  spdlog::warn("sim: {} was issued into a stream capture (not capturable); the capture is invalidated", what);
  c.seq->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

// A copy between the client's memory and the device, captured: one node that fetches the client's rows
// into a staging buffer and copies them to the device, or the reverse, at each replay (sim_graph.cpp).
Status SimBackend::HostCopyCapture(HostRowsCopy copy, Stream stream, uint64_t id, uint32_t& captured) {
  captured = 0;
  Capture* c = capturing(stream);
  if (!c) return CUDA_SUCCESS;  // the client copies as usual
  captureNode(*c, hostCopyOp(copy, id), CU_GRAPH_NODE_TYPE_MEMCPY);
  captured = 1;
  return CUDA_SUCCESS;
}

Status SimBackend::StreamBeginCapture(Stream stream, uint32_t mode) {
  if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  if (stream == 0 || stream == 1) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy stream
  if (captures_.count(stream)) return CUDA_ERROR_ILLEGAL_STATE;
  auto seq = std::make_shared<CaptureSeq>();
  seq->id = next_capture_id_++;
  seq->graph = newHandle(HandleKind::kGraph);
  seq->origin = stream;
  graphs_[seq->graph];  // exists from now: its nodes are made as work is issued
  captures_[stream] = Capture{seq, {}};
  return CUDA_SUCCESS;
}

Status SimBackend::StreamBeginCaptureToGraph(Stream stream, Graph g, GraphNodes deps, uint32_t mode) {
  if (Status st = StreamBeginCapture(stream, mode); st != CUDA_SUCCESS) return st;
  Capture& c = captures_[stream];
  graphs_.erase(c.seq->graph);
  c.seq->graph = g.v;
  c.seq->existing = true;
  c.after = deps.v;
  return CUDA_SUCCESS;
}

// Whether every other stream of the capture has joined back: its open dependencies are nodes the origin's
// open dependencies follow (or are).
bool SimBackend::joined(const CaptureSeq& seq, const std::vector<uint64_t>& origin_after) const {
  std::unordered_set<uint64_t> reached(origin_after.begin(), origin_after.end());
  std::vector<uint64_t> todo(origin_after.begin(), origin_after.end());
  while (!todo.empty()) {
    uint64_t n = todo.back();
    todo.pop_back();
    auto node = nodes_.find(n);
    if (node == nodes_.end()) continue;  // destroyed since
    for (uint64_t d : node->second.deps)
      if (reached.insert(d).second) todo.push_back(d);
  }
  for (const auto& [stream, c] : captures_)
    if (c.seq.get() == &seq && stream != seq.origin)
      for (uint64_t n : c.after)
        if (!reached.count(n)) return false;
  return true;
}

Status SimBackend::StreamEndCapture(Stream stream, Created<Graph>& graph) {
  Capture* c = capturing(stream);
  if (!c) return CUDA_ERROR_ILLEGAL_STATE;
  std::shared_ptr<CaptureSeq> seq = c->seq;
  if (seq->origin != stream) {  // as the driver: ending elsewhere breaks the capture
    seq->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  }
  const bool all_joined = joined(*seq, c->after);
  std::erase_if(captures_, [&](const auto& e) { return e.second.seq == seq; });
  seq->ended = true;
  if (seq->invalidated || !all_joined) {
    if (!seq->existing) destroyGraph(seq->graph);
    return all_joined ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  }
  graph = seq->graph;
  return CUDA_SUCCESS;
}

Status SimBackend::StreamCaptureInfo(Stream stream, uint32_t& status, uint64_t& id) {
  CaptureState state;
  StreamCaptureState(stream, state);
  status = state.status;
  id = state.id;
  return CUDA_SUCCESS;
}

Status SimBackend::StreamCaptureState(Stream stream, CaptureState& out) {
  Capture* c = capturing(stream);
  out = CaptureState{};
  if (!c) return CUDA_SUCCESS;  // CU_STREAM_CAPTURE_STATUS_NONE
  out.status = c->seq->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  out.id = c->seq->id;
  out.graph = c->seq->graph;
  out.deps.v = c->after;
  for (uint64_t n : c->after) out.types.push_back(nodes_.count(n) ? nodes_.at(n).type : CU_GRAPH_NODE_TYPE_EMPTY);
  return CUDA_SUCCESS;
}

Status SimBackend::StreamUpdateCaptureDeps(Stream stream, Graph g, GraphNodes deps, uint32_t flags) {
  Capture* c = capturing(stream);
  if (!c || c->seq->invalidated) return CUDA_ERROR_ILLEGAL_STATE;
  if (g.v != c->seq->graph || flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES) return CUDA_ERROR_INVALID_VALUE;
  if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES) c->after.clear();
  for (uint64_t n : deps.v)
    if (std::find(c->after.begin(), c->after.end(), n) == c->after.end()) c->after.push_back(n);
  return CUDA_SUCCESS;
}

Status SimBackend::EventRecord(Event event, Stream stream, uint32_t flags) {
  Capture* c = capturing(stream);
  if (c && !(flags & CU_EVENT_RECORD_EXTERNAL)) {  // no node: the event holds where the stream is
    captured_events_[event] = CapturedEvent{c->seq, c->after};
    return CUDA_SUCCESS;
  }
  captured_events_.erase(event);
  issue(stream, eventOp(event, 0), CU_GRAPH_NODE_TYPE_EVENT_RECORD, eventParams(event));
  return CUDA_SUCCESS;
}

Status SimBackend::StreamWaitEvent(Stream stream, Event event, uint32_t flags) {
  Capture* c = capturing(stream);
  if (c && (flags & CU_EVENT_WAIT_EXTERNAL)) {
    captureNode(*c, eventOp(event, 1), CU_GRAPH_NODE_TYPE_WAIT_EVENT, eventParams(event));
    return CUDA_SUCCESS;
  }
  auto e = captured_events_.find(event);
  if (e == captured_events_.end() || e->second.seq->ended) return CUDA_SUCCESS;  // work runs in issue order
  if (!c) {  // the stream joins the capture
    captures_[stream] = Capture{e->second.seq, e->second.after};
    return CUDA_SUCCESS;
  }
  if (c->seq != e->second.seq) return refuseInCapture(*c, "a wait on another capture's event");
  for (uint64_t n : e->second.after)
    if (std::find(c->after.begin(), c->after.end(), n) == c->after.end()) c->after.push_back(n);
  return CUDA_SUCCESS;
}

}  // namespace gpool::worker
