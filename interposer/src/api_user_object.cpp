// User objects (cuUserObjectCreate, cuUserObjectRetain/Release, cuGraphRetainUserObject/Release), as NCCL
// uses them to free what a captured collective holds once no graph needs it. The object and its counts
// are the worker's driver's; its destructor runs here, on the host-function thread (api_host_func.cpp),
// when the worker says the last reference went. As in CUDA, a destructor must not call CUDA.
#include <climits>

#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

uint64_t raw(const void* h) { return reinterpret_cast<uint64_t>(h); }

bool countTaken(unsigned count) { return count != 0 && count <= INT_MAX; }

}  // namespace

GPOOL_EXPORT CUresult cuUserObjectCreate(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned refs, unsigned flags) {
  GPOOL_TRY
  if (!out || !destroy || !countTaken(refs) || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  uint64_t id = 0;
  if (CUresult r = hostFunctionId(conn, [destroy, ptr] { destroy(ptr); }, id, true)) return r;
  calls::UserObjectCreate::out::tuple o;
  int st = conn->call<calls::UserObjectCreate>(o, id, refs);
  *out = st == CUDA_SUCCESS ? reinterpret_cast<CUuserObject>(std::get<0>(o).v) : nullptr;
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuUserObjectRetain(CUuserObject obj, unsigned count) {
  GPOOL_TRY
  if (!obj || !countTaken(count)) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(obj));
  return static_cast<CUresult>(conn->call<calls::UserObjectRetain>(gpool::proto::RefsAdded{raw(obj), count, 0}));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuUserObjectRelease(CUuserObject obj, unsigned count) {
  GPOOL_TRY
  if (!obj || !countTaken(count)) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(obj));
  return static_cast<CUresult>(conn->call<calls::UserObjectRelease>(gpool::proto::RefsReleased{raw(obj), count}));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject obj, unsigned count, unsigned flags) {
  GPOOL_TRY
  if (!graph || !obj || !countTaken(count) || (flags & ~unsigned{CU_GRAPH_USER_OBJECT_MOVE})) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  const uint32_t move = flags & CU_GRAPH_USER_OBJECT_MOVE ? 1 : 0;
  return static_cast<CUresult>(conn->call<calls::GraphRetainUserObject>(raw(graph), gpool::proto::RefsAdded{raw(obj), count, move}));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject obj, unsigned count) {
  GPOOL_TRY
  if (!graph || !obj || !countTaken(count)) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(graph));
  return static_cast<CUresult>(conn->call<calls::GraphReleaseUserObject>(raw(graph), gpool::proto::RefsReleased{raw(obj), count}));
  GPOOL_CATCH
}
