// The references to user objects (cuUserObjectCreate) that the client and each graph hold, as the worker
// counts them: a release of more than its holder has would make the driver drop an object still in use.
// An object is known while the client or a graph holds a reference; an instantiation's references are
// the driver's own (taken from its graph, dropped when it is destroyed). A clone holds what its graph
// held; a destroyed graph holds nothing.
#pragma once

#include <cstdint>
#include <unordered_map>

namespace gpool::worker {

class UserObjectRefs {
 public:
  void created(uint64_t obj, uint64_t refs) { objects_[obj].client = refs; }
  bool known(uint64_t obj) const { return objects_.count(obj) != 0; }
  // What `graph` (0: the client) holds of `obj`.
  uint64_t held(uint64_t obj, uint64_t graph) const {
    auto it = objects_.find(obj);
    if (it == objects_.end()) return 0;
    if (!graph) return it->second.client;
    auto g = it->second.graphs.find(graph);
    return g == it->second.graphs.end() ? 0 : g->second;
  }
  // `count` more for `graph` (0: the client), taken from the client's when `move`.
  void add(uint64_t obj, uint64_t graph, uint64_t count, bool move) {
    Refs& r = objects_.at(obj);
    (graph ? r.graphs[graph] : r.client) += count;
    if (move) r.client -= count;
  }
  void release(uint64_t obj, uint64_t graph, uint64_t count) {
    Refs& r = objects_.at(obj);
    if (!graph) r.client -= count;
    else if ((r.graphs[graph] -= count) == 0) r.graphs.erase(graph);
    forgetIfUnheld(obj);
  }
  void copyGraph(uint64_t from, uint64_t to) {
    for (auto& [obj, r] : objects_)
      if (auto it = r.graphs.find(from); it != r.graphs.end()) r.graphs[to] = it->second;
  }
  void graphGone(uint64_t graph) {
    for (auto it = objects_.begin(); it != objects_.end();) {
      it->second.graphs.erase(graph);
      it = unheld(it->second) ? objects_.erase(it) : std::next(it);
    }
  }
  void clear() { objects_.clear(); }

 private:
  struct Refs {
    uint64_t client = 0;
    std::unordered_map<uint64_t, uint64_t> graphs;  // graph -> references
  };
  static bool unheld(const Refs& r) { return r.client == 0 && r.graphs.empty(); }
  void forgetIfUnheld(uint64_t obj) {
    if (unheld(objects_.at(obj))) objects_.erase(obj);
  }
  std::unordered_map<uint64_t, Refs> objects_;
};

}  // namespace gpool::worker
