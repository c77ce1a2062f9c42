// Checks every typed field of a request (fields.h) against what this worker handed out, before a backend
// runs it, and records what a successful reply hands out or a request ends. Backends therefore receive
// only handles and ranges that are theirs, and the lease's memory is counted on every allocation path.
#pragma once

#include <functional>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpool/protocol/calls.h"
#include "graph_memory.h"
#include "handle_table.h"
#include "memory_ledger.h"
#include "user_object_refs.h"

namespace gpool::worker {

// What one request's checks learned, for recording its reply and settling it afterwards.
struct CallScope {
  uint64_t owner = 0;                               // module or library a new function/kernel/global belongs to
  HandleKind new_launchable = HandleKind::kFunction;  // what a Created<Launchable> is
  uint64_t reserved = 0;                            // bytes held in the ledger for this call
  std::vector<std::pair<HandleKind, uint64_t>> released;
  const DeviceRange* freed = nullptr;
  const DeviceRange* found = nullptr;               // what a DevAddress points into
  std::vector<std::function<void()>> effects;       // table changes the call makes when it succeeds
  uint64_t graph = 0;                               // the request's graph, whose nodes it may name
  uint64_t node = 0;                                // the node named or handed out (owner of its body graphs)
  proto::ArrayShape array;                          // the shape of the array a Created<Array> hands out
  proto::MipmapShape mipmap;                        // the shape of the mipmap a Created<MipmappedArray> hands out
  uint64_t capture = 0;                             // the graph a stream-ordered allocation or free is captured into
  uint64_t refs = 0;                                // a new user object's references
  std::vector<uint64_t> asked;                      // addresses a GraphAllocationsGone asks about
};

template <typename T>
concept PlainField = std::is_arithmetic_v<T> || std::is_same_v<T, std::string> || std::is_same_v<T, proto::Blob> ||
                     proto::IsVector<T>::value;

class RequestChecks {
 public:
  RequestChecks(HandleTable& table, MemoryLedger& ledger, GraphMemory& graphs)
      : table_(table), ledger_(ledger), graph_memory_(graphs) {}

  // Checks all request fields in order; the first failure is the call's status.
  template <typename Tuple>
  proto::Status admitAll(Tuple& ins, CallScope& s) {
    proto::Status st = proto::cu::kSuccess;
    std::apply([&](auto&... f) { ((st = st == proto::cu::kSuccess ? admit(f, s) : st), ...); }, ins);
    return st;
  }
  // After the backend succeeded: remembers what the reply hands out, forgets what the request ended.
  template <typename Tuple>
  void commit(Tuple& outs, CallScope& s) {
    std::apply([&](auto&... f) { (record(f, s), ...); }, outs);
    for (auto [kind, h] : s.released) {
      if (kind == HandleKind::kPhysical) ledger_.release(table_.releasePhysical(h));
      else if (kind == HandleKind::kArray) ledger_.release(table_.releaseArray(h));
      else if (kind == HandleKind::kMipmappedArray) ledger_.release(table_.releaseMipmap(h));
      else table_.remove(kind, h);
      if (kind == HandleKind::kGraph || kind == HandleKind::kGraphExec) graph_memory_.release(h);
      if (kind == HandleKind::kGraph) user_objects_.graphGone(h);
    }
    for (auto& effect : s.effects) effect();
    if (s.freed) {
      ledger_.release(s.freed->bytes);
      table_.removeRange(s.freed->base);
    }
    ledger_.release(s.reserved);  // a reservation no reply field took
  }
  // A capture ended (StreamEndCapture) with or without its graph: a graph made by a capture that failed is
  // gone, with what it held, unless it is one the client captured into.
  void captureEnded(uint64_t graph, bool made);

  // After the backend failed (or a check did): gives back what was reserved.
  void abandon(CallScope& s) { ledger_.release(s.reserved); }

  HandleTable& table() { return table_; }
  MemoryLedger& ledger() { return ledger_; }

 private:
  template <PlainField T>
  proto::Status admit(T&, CallScope&) { return proto::cu::kSuccess; }
  template <HandleKind K>
  proto::Status admit(proto::Handle<K>& h, CallScope& s);
  template <typename T>
  proto::Status admit(proto::Released<T>& h, CallScope& s);
  proto::Status admit(proto::Launchable& f, CallScope& s);
  proto::Status admit(proto::ModuleRef& m, CallScope& s);
  proto::Status admit(proto::DevRange& r, CallScope&);
  proto::Status admit(proto::DevWrite& w, CallScope&);
  proto::Status admit(proto::DevCopy& c, CallScope&);
  proto::Status admit(proto::DevFill& f, CallScope&);
  proto::Status admit(proto::DevAddress& a, CallScope& s);
  proto::Status admit(proto::DevRect& r, CallScope&);
  proto::Status admit(proto::DevWriteRect& w, CallScope& s);
  proto::Status admit(proto::HostRowsCopy& c, CallScope& s);
  proto::Status admit(proto::DevCopyRect& c, CallScope& s);
  proto::Status admit(proto::DevFillRect& f, CallScope& s);
  proto::Status admit(proto::PitchedAlloc& a, CallScope& s);
  proto::Status admit(proto::PoolAttribute& a, CallScope&);
  proto::Status admit(proto::DevWord& w, CallScope&);
  proto::Status admit(proto::MemOps& ops, CallScope&);
  proto::Status admit(proto::VaMap& m, CallScope& s);
  proto::Status admit(proto::VaUnmap& u, CallScope& s);
  proto::Status admit(proto::VaMapped& m, CallScope&);
  proto::Status admit(proto::JitOptions& o, CallScope&);
  proto::Status admit(proto::LaunchAttrs& a, CallScope&);
  proto::Status admit(proto::AllocBase& a, CallScope&) {
    return table_.allocationAt(a.ptr) ? proto::cu::kSuccess : proto::cu::kInvalidValue;
  }
  proto::Status admit(proto::IpcMapped& m, CallScope& s) {
    const DeviceRange* r = table_.findRange(m.ptr);
    if (!r || r->base != m.ptr || r->kind != RangeKind::kIpc) return proto::cu::kInvalidValue;
    s.effects.push_back([this, p = m.ptr] { table_.closeIpc(p); });
    return proto::cu::kSuccess;
  }
  proto::Status admit(proto::GraphNodes& n, CallScope& s);
  proto::Status admit(proto::GraphEdges& e, CallScope& s) {
    if (e.from.v.size() != e.to.v.size()) return proto::cu::kInvalidValue;
    proto::Status st = admit(e.from, s);
    return st ? st : admit(e.to, s);
  }
  proto::Status admit(proto::ChildGraph& c, CallScope& s) {
    return table_.has(HandleKind::kGraph, c.v) && c.v != s.graph ? proto::cu::kSuccess : proto::cu::kInvalidHandle;
  }
  proto::Status admit(proto::KernelCall& k, CallScope& s) { return admit(k.f, s); }
  proto::Status admit(proto::ResetAll&, CallScope& s) {
    s.effects.push_back([this] {
      table_.resetContext();
      graph_memory_.clear();
      user_objects_.clear();
      ledger_.clear();
    });
    return proto::cu::kSuccess;
  }
  proto::Status admit(proto::HostWindow& w, CallScope& s);
  proto::Status admit(proto::KeptFree& k, CallScope& s);
  proto::Status admit(proto::HostRange& r, CallScope& s);
  proto::Status admit(proto::HostRangeBase& r, CallScope& s);
  proto::Status freeReservation(const proto::VaRange& r, CallScope& s);
  proto::Status admit(proto::AllocBytes& a, CallScope& s);
  proto::Status admit(proto::ArrayShape& a, CallScope& s);
  proto::Status admit(proto::ArrayRect& r, CallScope&);
  proto::Status admit(proto::ArrayWrite& w, CallScope& s);
  proto::Status admit(proto::ArrayDevCopy& c, CallScope& s);
  proto::Status admit(proto::ArrayCopy& c, CallScope& s);
  proto::Status admit(proto::TexResource& r, CallScope& s);
  proto::Status admit(proto::MipmapShape& m, CallScope& s);
  proto::Status admit(proto::MipmapLevel& l, CallScope& s);
  proto::Status admit(proto::TexDescs& d, CallScope&) {
    const bool sized = d.texture.size() == proto::TexDescs::kTextureBytes && (d.view.empty() || d.view.size() == proto::TexDescs::kViewBytes);
    return sized ? proto::cu::kSuccess : proto::cu::kInvalidValue;
  }
  proto::Status admit(proto::FreedAlloc& f, CallScope& s);
  proto::Status admit(proto::FreedAddresses& f, CallScope& s) {
    s.asked = std::move(f.v);
    return proto::cu::kSuccess;
  }
  proto::Status admit(proto::TensorMapShape& t, CallScope&) { return t.consistent() ? proto::cu::kSuccess : proto::cu::kInvalidValue; }
  // A green context's SMs, or the device's all (0).
  proto::Status admit(proto::SmSource& g, CallScope&) {
    return g.v == 0 || table_.has(HandleKind::kGreenCtx, g.v) ? proto::cu::kSuccess : proto::cu::kInvalidHandle;
  }
  proto::Status admit(proto::SmSplit& s, CallScope&) {
    return s.groups <= proto::SmSplit::kMaxGroups ? proto::cu::kSuccess : proto::cu::kInvalidValue;
  }
  proto::Status admit(proto::GraphAllocBytes& b, CallScope&) { return b.bytes ? proto::cu::kSuccess : proto::cu::kInvalidValue; }
  proto::Status admit(proto::GraphFreed& f, CallScope& s);
  proto::Status admit(proto::NewRefs& r, CallScope& s);
  proto::Status admit(proto::RefsAdded& r, CallScope& s);
  proto::Status admit(proto::RefsReleased& r, CallScope& s);

  template <typename T>
  void record(T&, CallScope&) {}  // reply fields that hand nothing out
  template <HandleKind K>
  void record(proto::Created<proto::Handle<K>>& h, CallScope& s) {
    if constexpr (K == HandleKind::kGraphNode || K == HandleKind::kConditional) {
      table_.add(K, h.v, s.graph);
      if constexpr (K == HandleKind::kGraphNode) s.node = h.v;
    } else if constexpr (K == HandleKind::kPhysical) {
      table_.addPhysical(h.v, s.reserved);  // the AllocBytes reservation is now this memory's
      s.reserved = 0;
    } else if constexpr (K == HandleKind::kArray) {
      table_.addArray(h.v, s.array, s.reserved, s.owner);  // the ArrayShape's reservation (a mipmap's level: none)
      s.reserved = 0;
    } else if constexpr (K == HandleKind::kMipmappedArray) {
      table_.addMipmap(h.v, s.mipmap, s.reserved);
      s.reserved = 0;
    } else if constexpr (K == HandleKind::kUserObject) {
      user_objects_.created(h.v, s.refs);  // counted there, not in the table
    } else if (K != HandleKind::kGraph || !table_.has(K, h.v)) {  // a graph captured into keeps its owner
      table_.add(K, h.v, s.owner);
    }
    // An instantiation, or a clone, holds its graph's memory nodes.
    if constexpr (K == HandleKind::kGraphExec || K == HandleKind::kGraph)
      if (s.graph) graph_memory_.copyHolder(s.graph, h.v);
    if constexpr (K == HandleKind::kGraph)  // a clone holds its graph's user object references
      if (s.graph) user_objects_.copyGraph(s.graph, h.v);
  }
  void record(proto::Created<proto::VaRange>& r, CallScope&) { table_.addReservation(r.ptr, r.size); }
  void record(proto::Created<proto::GraphNodes>& n, CallScope& s) {
    for (uint64_t node : n.v) table_.add(HandleKind::kGraphNode, node, s.graph);
  }
  void record(proto::Created<proto::BodyGraphs>& b, CallScope& s) { table_.addBodies(s.node, b.v); }
  void record(proto::Created<proto::Launchable>& f, CallScope& s);
  void record(proto::Created<proto::LaunchableList>& l, CallScope& s);
  void record(proto::Created<proto::ModuleRef>& m, CallScope&);
  void record(proto::NewAlloc& a, CallScope& s);
  void record(proto::GraphAlloc& a, CallScope& s) { graph_memory_.addAllocation(s.graph, a.ptr, a.bytes); }
  void record(proto::CaptureState& c, CallScope&);
  void record(proto::ModuleGlobal& g, CallScope& s);
  void record(proto::MemView& m, CallScope&) { ledger_.view(m); }
  void record(proto::IpcMapping& m, CallScope&) { table_.openIpc(m.ptr, m.bytes); }
  void record(proto::ImportedPhysical& p, CallScope&) { table_.addPhysical(p.handle.v, p.bytes, false); }
  void record(proto::GoneAllocations& g, CallScope& s) {
    g.v = graph_memory_.takeGone();
    for (uint64_t p : s.asked)
      if (!graph_memory_.isAllocation(p)) g.v.push_back(p);
  }
  void record(proto::RangeOf& r, CallScope& s) { r = proto::RangeOf{s.found->base, s.found->bytes}; }
  void record(proto::OwnerOf& o, CallScope& s) {
    o.handle = s.owner;
    o.kind = table_.has(HandleKind::kLibrary, s.owner) ? 1 : 0;
  }

  proto::Status range(uint64_t ptr, uint64_t bytes) const {
    return table_.containsRange(ptr, bytes) ? proto::cu::kSuccess : proto::cu::kInvalidValue;
  }
  static HandleKind moduleKind(uint32_t kind) { return kind == 0 ? HandleKind::kModule : HandleKind::kLibrary; }

  HandleTable& table_;
  MemoryLedger& ledger_;
  GraphMemory& graph_memory_;
  UserObjectRefs user_objects_;
  std::unordered_set<uint64_t> capture_graphs_;  // graphs recorded while their capture lasts (CaptureState)
};

template <HandleKind K>
proto::Status RequestChecks::admit(proto::Handle<K>& h, CallScope& s) {
  bool known = K == HandleKind::kStream ? table_.hasStream(h.v) : table_.has(K, h.v);
  if (!known) return proto::cu::kInvalidHandle;
  if constexpr (K == HandleKind::kKernel) s.owner = table_.ownerOf(K, h.v);  // its function shares its module
  if constexpr (K == HandleKind::kGraph) s.graph = h.v;
  if constexpr (K == HandleKind::kGraphNode || K == HandleKind::kConditional) {
    if (table_.ownerOf(K, h.v) != s.graph) return proto::cu::kInvalidValue;  // another graph's
  }
  if constexpr (K == HandleKind::kGraphNode) s.node = h.v;  // a graph the reply names may be this node's
  return proto::cu::kSuccess;
}

template <typename T>
proto::Status RequestChecks::admit(proto::Released<T>& h, CallScope& s) {
  if constexpr (std::is_same_v<T, proto::VaRange>) {
    return freeReservation(h, s);
  } else {
    if (proto::Status st = admit(static_cast<T&>(h), s); st != proto::cu::kSuccess) return st;
    if constexpr (std::is_same_v<T, proto::ModuleRef>) {
      s.released.emplace_back(moduleKind(h.kind), h.handle);
    } else {
      if (T::kind == HandleKind::kArray && table_.ownerOf(HandleKind::kArray, h.v) != 0) return proto::cu::kInvalidValue;  // a mipmap's level
      if (T::kind == HandleKind::kStream && h.v <= 2) return proto::cu::kInvalidHandle;  // the default streams stay
      if (T::kind == HandleKind::kGraph && table_.ownerOf(T::kind, h.v) != 0) return proto::cu::kInvalidValue;  // a node's body
      s.released.emplace_back(T::kind, h.v);
    }
    return proto::cu::kSuccess;
  }
}

}  // namespace gpool::worker
