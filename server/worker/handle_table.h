// What this worker handed out to its client: handles by kind (with the module that owns each function,
// kernel and global) and device ranges (allocations and module globals). The one table every request's
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

enum class RangeKind { kAllocation, kGlobal };

struct DeviceRange {
  uint64_t base = 0, bytes = 0;
  RangeKind kind = RangeKind::kAllocation;
  uint64_t owner = 0;  // the module a global belongs to
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
  // Ends a handle and, for a module or library, every handle and global it owns.
  void remove(HandleKind k, uint64_t h);
  // Streams named by value 0 (legacy default), 1 (CU_STREAM_LEGACY) and 2 (CU_STREAM_PER_THREAD) always exist.
  bool hasStream(uint64_t s) const { return s <= 2 || has(HandleKind::kStream, s); }

  // Device ranges.
  void addRange(const DeviceRange& r) { ranges_[r.base] = r; }
  void removeRange(uint64_t base) { ranges_.erase(base); }
  // The range that fully contains [ptr, ptr+bytes), if any.
  const DeviceRange* findRange(uint64_t ptr, uint64_t bytes = 1) const;
  bool containsRange(uint64_t ptr, uint64_t bytes) const { return bytes == 0 || findRange(ptr, bytes) != nullptr; }
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
};

inline void HandleTable::remove(HandleKind k, uint64_t h) {
  handles_.erase(key(k, h));
  if (k != HandleKind::kModule && k != HandleKind::kLibrary) return;
  std::erase_if(handles_, [h](const auto& e) { return e.second == h; });
  std::erase_if(ranges_, [h](const auto& e) { return e.second.kind == RangeKind::kGlobal && e.second.owner == h; });
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
