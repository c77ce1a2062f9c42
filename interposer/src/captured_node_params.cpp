// The parameters of graph nodes a stream capture made. The worker's driver made them, so this process
// has no record of what they hold until a getter names one: then the worker is asked, once, and the answer
// is recorded as an added node's parameters are (graph_nodes.h), so the getters answer from the record as
// CUDA's do — a kernel node's function is the handle this process launched with, its kernelParams point at
// argument values that live as long as the node's record. Programs that rewrite captured graphs read them
// this way (the nodes of a capture, each kernel node's parameters, then the instantiation's set afresh).
#include <cstring>
#include <mutex>
#include <utility>

#include "graph_nodes.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

// Whether a node's record lacks what the getter of `type` returns: a node of the worker's making.
bool unknown(const GraphNodeInfo& i, CUgraphNodeType type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return !i.kernel.func && !i.kernel.kern;
    case CU_GRAPH_NODE_TYPE_MEMSET: return !i.memset.dst;
    case CU_GRAPH_NODE_TYPE_MEMCPY: return !i.copy.srcMemoryType;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return !i.event;
    case CU_GRAPH_NODE_TYPE_HOST: return !i.host.fn;
    default: return false;
  }
}

// Asks the worker `Call` of a node; where it answers CUDA_ERROR_NOT_SUPPORTED (a node of its own making),
// logs `refused` when given.
template <typename Call, typename... A>
CUresult ask(Connection* conn, typename Call::out::tuple& r, const char* refused, A... args) {
  int st = conn->call<Call>(r, args...);
  if (st == CUDA_ERROR_NOT_SUPPORTED && refused) GPOOL_LOG(Level::kWarn, "%s", refused);
  return static_cast<CUresult>(st);
}

// Fills `info` with what the worker says of a kernel node: the launch's handle (a CUkernel in `kern`, a
// CUfunction in `func`, as the program launched it), shape and argument bytes,
// each argument's place given by the function's layout (a reply too short for it is the worker's fault).
CUresult kernelOf(Connection* conn, uint64_t graph, uint64_t node, GraphNodeInfo& info) {
  calls::GraphKernelNodeGetParams::out::tuple r;
  if (CUresult st = ask<calls::GraphKernelNodeGetParams>(conn, r, nullptr, graph, node)) return st;
  const auto& shape = std::get<2>(r);
  uint64_t f = std::get<0>(r).v;
  State::ParamLayout layout;
  if (shape.size() != 7) return CUDA_ERROR_UNKNOWN;
  if (CUresult e = State::get().paramLayout(f, layout)) return e;
  info.packed = std::move(std::get<3>(r));
  info.kernel = CUDA_KERNEL_NODE_PARAMS{};
  if (!info.pointArgs(*layout)) return CUDA_ERROR_UNKNOWN;
  if (std::get<1>(r)) info.kernel.kern = reinterpret_cast<CUkernel>(f);  // where the CUDA runtime looks for its kernels
  else info.kernel.func = reinterpret_cast<CUfunction>(f);
  info.kernel.gridDimX = shape[0], info.kernel.gridDimY = shape[1], info.kernel.gridDimZ = shape[2];
  info.kernel.blockDimX = shape[3], info.kernel.blockDimY = shape[4], info.kernel.blockDimZ = shape[5];
  info.kernel.sharedMemBytes = shape[6];
  return CUDA_SUCCESS;
}

CUresult memsetOf(Connection* conn, uint64_t graph, uint64_t node, GraphNodeInfo& info) {
  calls::GraphMemsetNodeGetParams::out::tuple r;
  if (CUresult st = ask<calls::GraphMemsetNodeGetParams>(conn, r, nullptr, graph, node)) return st;
  const gpool::proto::DevFillRect& f = std::get<0>(r);
  if ((f.elem != 1 && f.elem != 2 && f.elem != 4) || f.dst.width % f.elem || !f.dst.ptr) return CUDA_ERROR_UNKNOWN;
  info.memset = CUDA_MEMSET_NODE_PARAMS{f.dst.ptr, f.dst.pitch, std::get<1>(r), f.elem, f.dst.width / f.elem, f.dst.height};
  return CUDA_SUCCESS;
}

// A copy between device memory; a captured host copy's node (the worker's staging buffer at one end) is
// CUDA_ERROR_NOT_SUPPORTED, with a line saying so.
CUresult copyOf(Connection* conn, uint64_t graph, uint64_t node, GraphNodeInfo& info) {
  calls::GraphMemcpyNodeGetParams::out::tuple r;
  const char* refused = "cuGraphMemcpyNodeGetParams: the parameters of a memcpy node that a stream capture made of a copy "
                        "between host memory and the device are not given by gpool (the worker copies through a buffer of "
                        "its own); copies between device memory are (returning CUDA_ERROR_NOT_SUPPORTED)";
  if (CUresult st = ask<calls::GraphMemcpyNodeGetParams>(conn, r, refused, graph, node)) return st;
  const gpool::proto::DevCopyRect& c = std::get<0>(r);
  info.copy = CUDA_MEMCPY3D{};
  info.copy.srcMemoryType = info.copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  info.copy.srcDevice = c.src.ptr, info.copy.srcPitch = c.src.pitch, info.copy.srcHeight = c.src.height;
  info.copy.dstDevice = c.dst.ptr, info.copy.dstPitch = c.dst.pitch, info.copy.dstHeight = c.dst.height;
  info.copy.WidthInBytes = c.dst.width, info.copy.Height = c.dst.height, info.copy.Depth = 1;
  return CUDA_SUCCESS;
}

CUresult eventOf(Connection* conn, uint64_t graph, uint64_t node, bool wait, GraphNodeInfo& info) {
  calls::GraphEventNodeGetEvent::out::tuple r;
  if (CUresult st = ask<calls::GraphEventNodeGetEvent>(conn, r, nullptr, graph, node, uint32_t{wait})) return st;
  info.event = reinterpret_cast<CUevent>(std::get<0>(r).v);
  return CUDA_SUCCESS;
}

// A host node a capture made of cuLaunchHostFunc: the function and argument this process launched. The
// worker's own (a captured host copy's) is CUDA_ERROR_NOT_SUPPORTED, with a line saying so.
CUresult hostOf(Connection* conn, uint64_t graph, uint64_t node, GraphNodeInfo& info) {
  calls::GraphHostNodeGetParams::out::tuple r;
  const char* refused = "cuGraphHostNodeGetParams: a host node that a stream capture made of a copy between host memory "
                        "and the device is gpool's own, with no parameters to give (returning CUDA_ERROR_NOT_SUPPORTED)";
  if (CUresult st = ask<calls::GraphHostNodeGetParams>(conn, r, refused, graph, node)) return st;
  if (!hostFunctionOf(std::get<0>(r), info.host.fn, info.host.userData)) return CUDA_ERROR_UNKNOWN;
  return CUDA_SUCCESS;
}

// What the worker says of a node of `type`.
CUresult askWorker(uint64_t graph, uint64_t node, CUgraphNodeType type, GraphNodeInfo& info) {
  GPOOL_CONN_OF_HANDLE(conn, graph);
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return kernelOf(conn, graph, node, info);
    case CU_GRAPH_NODE_TYPE_MEMSET: return memsetOf(conn, graph, node, info);
    case CU_GRAPH_NODE_TYPE_MEMCPY: return copyOf(conn, graph, node, info);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return eventOf(conn, graph, node, false, info);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return eventOf(conn, graph, node, true, info);
    case CU_GRAPH_NODE_TYPE_HOST: return hostOf(conn, graph, node, info);
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

CUresult gpool::client::knownParams(CUgraphNode node, CUgraphNodeType type) {
  uint64_t graph = 0;
  bool ask = false;
  {
    std::lock_guard lock(graphNodes().mu);
    auto it = graphNodes().nodes.find(reinterpret_cast<uint64_t>(node));
    if (it == graphNodes().nodes.end() || it->second.type != type) return CUDA_ERROR_INVALID_VALUE;
    graph = it->second.graph;
    ask = unknown(it->second, type);
  }
  if (!ask) return CUDA_SUCCESS;
  GraphNodeInfo info;
  if (CUresult r = askWorker(graph, reinterpret_cast<uint64_t>(node), type, info)) return r;
  std::lock_guard lock(graphNodes().mu);
  auto it = graphNodes().nodes.find(reinterpret_cast<uint64_t>(node));
  if (it == graphNodes().nodes.end() || it->second.type != type) return CUDA_ERROR_INVALID_VALUE;  // destroyed meanwhile
  if (!unknown(it->second, type)) return CUDA_SUCCESS;  // set meanwhile: that record is newer
  info.graph = graph;
  info.type = type;
  it->second = std::move(info);
  it->second.kernel.kernelParams = it->second.args.empty() ? nullptr : it->second.args.data();
  return CUDA_SUCCESS;
}
