// Bookkeeping both backends use to validate what clients send: live allocations (for range checks)
// and the handles the worker itself handed out, per kind. Nothing from the network is trusted.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace gpool::worker {

enum class HandleKind { kStream, kEvent, kModule, kLibrary, kFunction, kKernel, kGraph, kGraphExec };

class Resources {
 public:
  void addRange(uint64_t base, uint64_t bytes) { ranges_[base] = bytes; }
  bool removeRange(uint64_t base) { return ranges_.erase(base) == 1; }
  // The allocation [base, size) that fully contains [ptr, ptr+bytes), if any.
  std::optional<std::pair<uint64_t, uint64_t>> findRange(uint64_t ptr, uint64_t bytes = 1) const {
    auto it = ranges_.upper_bound(ptr);
    if (it == ranges_.begin()) return std::nullopt;
    --it;
    uint64_t off = ptr - it->first;
    if (off >= it->second || bytes > it->second - off) return std::nullopt;
    return *it;
  }
  bool containsRange(uint64_t ptr, uint64_t bytes) const { return bytes == 0 || findRange(ptr, bytes).has_value(); }
  const std::map<uint64_t, uint64_t>& ranges() const { return ranges_; }

  void add(HandleKind k, uint64_t h) { handles_[k].insert(h); }
  bool remove(HandleKind k, uint64_t h) { return handles_[k].erase(h) == 1; }
  bool has(HandleKind k, uint64_t h) const {
    auto it = handles_.find(k);
    return it != handles_.end() && it->second.count(h) != 0;
  }
  // Streams named by value 0 (legacy default), 1 (CU_STREAM_LEGACY) and 2 (CU_STREAM_PER_THREAD) always exist.
  bool hasStream(uint64_t s) const { return s <= 2 || has(HandleKind::kStream, s); }
  bool hasLaunchable(uint64_t f) const { return has(HandleKind::kFunction, f) || has(HandleKind::kKernel, f); }

 private:
  std::map<uint64_t, uint64_t> ranges_;
  std::unordered_map<HandleKind, std::unordered_set<uint64_t>> handles_;
};

}  // namespace gpool::worker
