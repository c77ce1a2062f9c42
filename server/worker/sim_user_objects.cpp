// The sim backend's user objects: reference counts kept as the driver keeps them. The destructor is the
// client's host function (host_callbacks.h); it runs, here on the worker's thread, when the last
// reference goes, whoever held it: the client, a graph, or an instantiation of one.
#include <cuda.h>

#include "sim_backend.h"

namespace gpool::worker {

Status SimBackend::UserObjectCreate(uint64_t id, NewRefs refs, Created<UserObject>& out) {
  out = newHandle(HandleKind::kUserObject);
  user_objects_[out.v] = SimUserObject{id, refs.count};
  return CUDA_SUCCESS;
}

void SimBackend::dropObjectRefs(uint64_t obj, uint64_t count) {
  auto it = user_objects_.find(obj);
  if (it == user_objects_.end()) return;
  it->second.refs -= std::min(count, it->second.refs);
  if (it->second.refs) return;
  uint64_t destructor = it->second.id;
  user_objects_.erase(it);
  callbacks_.run(destructor);
}

void SimBackend::copyObjectRefs(uint64_t from, uint64_t to) {
  auto it = object_refs_.find(from);
  if (it == object_refs_.end()) return;
  std::map<uint64_t, uint64_t> held = it->second;
  for (auto& [obj, n] : held) {
    user_objects_[obj].refs += n;
    object_refs_[to][obj] += n;
  }
}

void SimBackend::releaseObjectRefs(uint64_t holder) {
  auto it = object_refs_.find(holder);
  if (it == object_refs_.end()) return;
  std::map<uint64_t, uint64_t> held = std::move(it->second);
  object_refs_.erase(it);
  for (auto& [obj, n] : held) dropObjectRefs(obj, n);
}

Status SimBackend::UserObjectRetain(RefsAdded r) {
  user_objects_.at(r.obj.v).refs += r.count;
  return CUDA_SUCCESS;
}

Status SimBackend::UserObjectRelease(RefsReleased r) {
  dropObjectRefs(r.obj.v, r.count);
  return CUDA_SUCCESS;
}

Status SimBackend::GraphRetainUserObject(Graph g, RefsAdded r) {
  if (!r.move) user_objects_.at(r.obj.v).refs += r.count;  // a move hands over the client's
  object_refs_[g.v][r.obj.v] += r.count;
  return CUDA_SUCCESS;
}

Status SimBackend::GraphReleaseUserObject(Graph g, RefsReleased r) {
  auto& held = object_refs_[g.v];
  if ((held[r.obj.v] -= r.count) == 0) held.erase(r.obj.v);
  dropObjectRefs(r.obj.v, r.count);
  return CUDA_SUCCESS;
}

}  // namespace gpool::worker
