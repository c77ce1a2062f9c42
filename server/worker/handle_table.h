// What this worker handed out to its client: handles by kind (with the module that owns each function,
// kernel and global), device ranges (allocations, module globals, mapped virtual memory), virtual address
// reservations and physical allocations (cuMemCreate) with what maps them. The one table every request's
// handles and ranges are checked against; nothing from the network is trusted.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "gpool/protocol/fields.h"

namespace gpool::worker {

using proto::HandleKind;

// kSharedHost: page-locked host memory of the client's in the shared pool (host_pool.h), which copies and
// kernels may name like device memory; it survives a context reset, as the client's host memory does.
// kGraphMemory: the address of a graph's allocation node (graph_memory.h owns when it ends).
enum class RangeKind { kAllocation, kGlobal, kMapping, kIpc, kSharedHost, kGraphMemory };

struct DeviceRange {
  uint64_t base = 0, bytes = 0;
  RangeKind kind = RangeKind::kAllocation;
  uint64_t owner = 0;  // the module a global belongs to; the physical allocation a mapping shows; how often
                       // IPC memory is open (the driver hands the same address out again, and counts)
};

// Physical memory from cuMemCreate: its size, the mappings that show it, and whether the client has
// released it (its memory lives on until the last mapping goes).
struct PhysicalMemory {
  uint64_t bytes = 0;
  uint32_t mappings = 0;
  bool released = false;
  bool charged = true;  // false: imported from another process, whose lease pays for it
  uint64_t charge() const { return charged ? bytes : 0; }
};

class HandleTable {
 public:
  // Handles. `owner` (0: none) is the module or library whose unloading ends this handle too.
  void add(HandleKind k, uint64_t h, uint64_t owner = 0) { handles_[key(k, h)] = owner; }
  bool has(HandleKind k, uint64_t h) const { return handles_.count(key(k, h)) != 0; }
  uint64_t ownerOf(HandleKind k, uint64_t h) const {
    auto it = handles_.find(key(k, h));
    return it == handles_.end() ? 0 : it->second;
  }
  // Ends a handle and, for a module, library or graph, every handle and global it owns; a conditional
  // node's body graphs end with the node or its graph.
  void remove(HandleKind k, uint64_t h);
  // The body graphs of a conditional node: the node owns them; the client may fill them, never destroy them.
  void addBodies(uint64_t node, const std::vector<uint64_t>& graphs) {
    for (uint64_t g : graphs) add(HandleKind::kGraph, g, node);
    bodies_[node] = graphs;
  }
  // A context reset: everything ends but libraries and their kernels, which CUDA keeps across contexts
  // (a library is loaded into each context as it is used; the runtime keeps using its kernels).
  void resetContext() {
    std::erase_if(handles_, [](const auto& e) { return e.first.kind != HandleKind::kLibrary && e.first.kind != HandleKind::kKernel; });
    std::erase_if(ranges_, [](const auto& e) { return e.second.kind != RangeKind::kSharedHost; });
    reservations_.clear();
    physical_.clear();
    arrays_.clear();
    mipmaps_.clear();
    bodies_.clear();
  }
  // Streams named by value 0 (legacy default), 1 (CU_STREAM_LEGACY) and 2 (CU_STREAM_PER_THREAD) always exist.
  bool hasStream(uint64_t s) const { return s <= 2 || has(HandleKind::kStream, s); }

  // Device ranges.
  void addRange(const DeviceRange& r) { ranges_[r.base] = r; }
  void removeRange(uint64_t base) { ranges_.erase(base); }
  // Memory opened by IPC (or from another process's pool): each open counts, and each close takes one back;
  // the range goes with the last.
  void openIpc(uint64_t base, uint64_t bytes) {
    auto [it, added] = ranges_.try_emplace(base, DeviceRange{base, bytes, RangeKind::kIpc, 0});
    if (!added && it->second.kind != RangeKind::kIpc) it->second = DeviceRange{base, bytes, RangeKind::kIpc, 0};
    ++it->second.owner;
  }
  void closeIpc(uint64_t base) {
    auto it = ranges_.find(base);
    if (it != ranges_.end() && it->second.kind == RangeKind::kIpc && --it->second.owner == 0) ranges_.erase(it);
  }
  // The range that fully contains [ptr, ptr+bytes), if any.
  const DeviceRange* findRange(uint64_t ptr, uint64_t bytes = 1) const;
  // Whether [ptr, ptr+bytes) is the client's device memory: inside one allocation or global, or across
  // mappings that sit next to each other (virtual memory is contiguous across them, as on the device).
  bool containsRange(uint64_t ptr, uint64_t bytes) const;
  // Whether any range overlaps [ptr, ptr+bytes).
  bool overlapsRange(uint64_t ptr, uint64_t bytes) const {
    auto it = ranges_.lower_bound(ptr + bytes);
    if (it == ranges_.begin()) return false;
    --it;
    return it->second.base + it->second.bytes > ptr;
  }
  // The shared pool's window (host_pool.h): where the client mapped it, set once; bytes 0 before.
  void setHostWindow(uint64_t base, uint64_t bytes) { window_ = {base, bytes}; }
  bool inHostWindow(uint64_t ptr, uint64_t bytes) const {
    return window_.second && ptr >= window_.first && bytes <= window_.second && ptr - window_.first <= window_.second - bytes;
  }
  bool hasHostWindow() const { return window_.second != 0; }
  // Virtual memory. A reservation is an address range; mappings inside it are device ranges.
  void addReservation(uint64_t base, uint64_t size) { reservations_[base] = size; }
  bool isReservation(uint64_t base, uint64_t size) const {
    auto it = reservations_.find(base);
    return it != reservations_.end() && it->second == size;
  }
  // Whether [ptr, ptr+size) lies inside one reservation.
  bool inReservation(uint64_t ptr, uint64_t size) const;
  void removeReservation(uint64_t base) { reservations_.erase(base); }
  // Mappings that overlap [ptr, ptr+size); `whole` is false when one sticks out of it.
  std::vector<const DeviceRange*> mappingsIn(uint64_t ptr, uint64_t size, bool& whole) const;
  // A handle the driver hands out again (memory imported twice into one process) keeps its mappings.
  void addPhysical(uint64_t h, uint64_t bytes, bool charged = true) {
    add(HandleKind::kPhysical, h);
    PhysicalMemory& p = physical_[h];
    p = PhysicalMemory{bytes, p.mappings, false, charged};
  }
  // Its charge moved elsewhere (import_holds.h): its last unmapping gives nothing back.
  void uncharge(uint64_t h) {
    if (auto it = physical_.find(h); it != physical_.end()) it->second.charged = false;
  }
  const PhysicalMemory* physical(uint64_t h) const {
    auto it = physical_.find(h);
    return it == physical_.end() ? nullptr : &it->second;
  }
  void map(uint64_t ptr, uint64_t size, uint64_t h) {
    addRange(DeviceRange{ptr, size, RangeKind::kMapping, h});
    ++physical_[h].mappings;
  }
  // Removes the mappings in [ptr, ptr+size); returns the bytes of physical memory this frees (released
  // allocations whose last mapping went).
  uint64_t unmap(uint64_t ptr, uint64_t size);
  // The client released physical memory: returns its bytes when nothing maps it, else 0 (they come back
  // from unmap).
  uint64_t releasePhysical(uint64_t h);

  // CUDA arrays and mipmapped arrays, each with its shape and the bytes charged for it. A mipmap's level,
  // once handed out, is an array the mipmap owns: charged nothing, ended with the mipmap.
  template <typename Shape>
  struct Charged {
    Shape shape;
    uint64_t bytes = 0;
  };
  using ArrayMemory = Charged<proto::ArrayShape>;
  using MipmapMemory = Charged<proto::MipmapShape>;
  void addArray(uint64_t h, const proto::ArrayShape& shape, uint64_t bytes, uint64_t mipmap = 0) {
    add(HandleKind::kArray, h, mipmap);
    arrays_[h] = ArrayMemory{shape, bytes};
  }
  void addMipmap(uint64_t h, const proto::MipmapShape& shape, uint64_t bytes) {
    add(HandleKind::kMipmappedArray, h);
    mipmaps_[h] = MipmapMemory{shape, bytes};
  }
  const ArrayMemory* array(uint64_t h) const { return lookup(arrays_, h); }
  const MipmapMemory* mipmap(uint64_t h) const { return lookup(mipmaps_, h); }
  // Ends an array; returns the bytes charged for it.
  uint64_t releaseArray(uint64_t h) {
    remove(HandleKind::kArray, h);
    return take(arrays_, h);
  }
  // Ends a mipmapped array and its levels; returns the bytes charged for it.
  uint64_t releaseMipmap(uint64_t h) {
    handles_.erase(key(HandleKind::kMipmappedArray, h));
    std::erase_if(arrays_, [&](const auto& e) { return ownerOf(HandleKind::kArray, e.first) == h; });
    std::erase_if(handles_, [&](const auto& e) { return e.first.kind == HandleKind::kArray && e.second == h; });
    return take(mipmaps_, h);
  }

  // What the client holds of a kind, for a worker that frees it once its client left (client_departure.cpp).
  std::vector<uint64_t> handlesOf(HandleKind k) const {
    std::vector<uint64_t> out;
    for (const auto& [key, owner] : handles_)
      if (key.kind == k) out.push_back(key.h);
    return out;
  }
  std::vector<DeviceRange> rangesOf(RangeKind k) const {
    std::vector<DeviceRange> out;
    for (const auto& [base, r] : ranges_)
      if (r.kind == k) out.push_back(r);
    return out;
  }

  // The live allocation that starts at `base` (never a global).
  const DeviceRange* allocationAt(uint64_t base) const {
    auto it = ranges_.find(base);
    return it != ranges_.end() && it->second.kind == RangeKind::kAllocation ? &it->second : nullptr;
  }

 private:
  struct Key {
    HandleKind kind;
    uint64_t h;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.h) ^ static_cast<size_t>(k.kind); }
  };
  static Key key(HandleKind k, uint64_t h) { return Key{k, h}; }

  std::unordered_map<Key, uint64_t, KeyHash> handles_;  // -> owner
  std::map<uint64_t, DeviceRange> ranges_;
  std::map<uint64_t, uint64_t> reservations_;  // base -> size
  std::pair<uint64_t, uint64_t> window_{0, 0};  // the host pool's base and bytes
  std::unordered_map<uint64_t, PhysicalMemory> physical_;
  template <typename M>
  static const typename M::mapped_type* lookup(const M& m, uint64_t h) {
    auto it = m.find(h);
    return it == m.end() ? nullptr : &it->second;
  }
  template <typename M>
  static uint64_t take(M& m, uint64_t h) {  // the bytes of h's entry, which goes
    auto it = m.find(h);
    if (it == m.end()) return 0;
    uint64_t bytes = it->second.bytes;
    m.erase(it);
    return bytes;
  }
  std::unordered_map<uint64_t, ArrayMemory> arrays_;
  std::unordered_map<uint64_t, MipmapMemory> mipmaps_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> bodies_;  // conditional node -> its body graphs
  void removeBodies(uint64_t node);
};

inline bool HandleTable::containsRange(uint64_t ptr, uint64_t bytes) const {
  if (bytes == 0 || findRange(ptr, bytes)) return true;
  if (ptr > UINT64_MAX - bytes) return false;
  const DeviceRange* r = findRange(ptr);
  uint64_t end = ptr + bytes;
  while (r && r->kind == RangeKind::kMapping) {
    uint64_t next = r->base + r->bytes;
    if (next >= end) return true;
    auto it = ranges_.find(next);
    r = it == ranges_.end() ? nullptr : &it->second;
  }
  return false;
}

inline bool HandleTable::inReservation(uint64_t ptr, uint64_t size) const {
  auto it = reservations_.upper_bound(ptr);
  if (it == reservations_.begin()) return false;
  --it;
  uint64_t off = ptr - it->first;
  return off < it->second && size <= it->second - off;
}

inline std::vector<const DeviceRange*> HandleTable::mappingsIn(uint64_t ptr, uint64_t size, bool& whole) const {
  std::vector<const DeviceRange*> out;
  whole = true;
  auto it = ranges_.upper_bound(ptr);
  if (it != ranges_.begin()) --it;
  for (; it != ranges_.end() && it->first < ptr + size; ++it) {
    const DeviceRange& r = it->second;
    if (r.kind != RangeKind::kMapping || r.base + r.bytes <= ptr) continue;
    if (r.base < ptr || r.base + r.bytes > ptr + size) whole = false;
    out.push_back(&r);
  }
  return out;
}

inline uint64_t HandleTable::unmap(uint64_t ptr, uint64_t size) {
  bool whole = true;
  uint64_t freed = 0;
  std::vector<uint64_t> bases;
  for (const DeviceRange* r : mappingsIn(ptr, size, whole)) bases.push_back(r->base);
  for (uint64_t base : bases) {
    uint64_t h = ranges_[base].owner;
    ranges_.erase(base);
    PhysicalMemory& p = physical_[h];
    if (--p.mappings == 0 && p.released) {
      freed += p.charge();
      physical_.erase(h);
    }
  }
  return freed;
}

inline uint64_t HandleTable::releasePhysical(uint64_t h) {
  remove(HandleKind::kPhysical, h);
  auto it = physical_.find(h);
  if (it == physical_.end()) return 0;
  if (it->second.mappings > 0) {
    it->second.released = true;
    return 0;
  }
  uint64_t bytes = it->second.charge();
  physical_.erase(it);
  return bytes;
}

inline void HandleTable::remove(HandleKind k, uint64_t h) {
  handles_.erase(key(k, h));
  if (k == HandleKind::kGraphNode) return removeBodies(h);
  if (k != HandleKind::kModule && k != HandleKind::kLibrary && k != HandleKind::kGraph) return;  // owners
  std::vector<uint64_t> conditional;  // the graph's nodes that own body graphs
  for (const auto& [owned, owner] : handles_)
    if (owner == h && owned.kind == HandleKind::kGraphNode && bodies_.count(owned.h)) conditional.push_back(owned.h);
  std::erase_if(handles_, [h](const auto& e) { return e.second == h; });
  std::erase_if(ranges_, [h](const auto& e) { return e.second.kind == RangeKind::kGlobal && e.second.owner == h; });
  for (uint64_t node : conditional) removeBodies(node);
}

inline void HandleTable::removeBodies(uint64_t node) {
  auto it = bodies_.find(node);
  if (it == bodies_.end()) return;
  std::vector<uint64_t> graphs = std::move(it->second);
  bodies_.erase(it);
  for (uint64_t g : graphs) remove(HandleKind::kGraph, g);
}

inline const DeviceRange* HandleTable::findRange(uint64_t ptr, uint64_t bytes) const {
  auto it = ranges_.upper_bound(ptr);
  if (it == ranges_.begin()) return nullptr;
  --it;
  const DeviceRange& r = it->second;
  uint64_t off = ptr - r.base;
  if (off >= r.bytes || bytes > r.bytes - off) return nullptr;
  return &r;
}

}  // namespace gpool::worker
