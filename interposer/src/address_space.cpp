// Device addresses reserved in the client's address space (address_space.h).
#include "address_space.h"

#include <sys/mman.h>
#include <unistd.h>

namespace gpool::client {
namespace {

uint64_t pageSize() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// Maps [start, start+len) inaccessible, only where nothing is mapped.
bool mapNone(uint64_t start, uint64_t len) {
  void* want = reinterpret_cast<void*>(start);
  void* got = mmap(want, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (got == MAP_FAILED) return false;
  if (got != want) {  // a kernel without MAP_FIXED_NOREPLACE treats it as a hint
    munmap(got, len);
    return false;
  }
  return true;
}

}  // namespace

bool AddressSpace::takeEdge(uint64_t page) {
  Page& p = edges_[page];
  if (p.users++ == 0) p.ours = mapNone(page, pageSize());
  return p.ours;
}

void AddressSpace::dropEdge(uint64_t page) {
  auto it = edges_.find(page);
  if (it == edges_.end() || --it->second.users > 0) return;
  if (it->second.ours) munmap(reinterpret_cast<void*>(page), pageSize());
  edges_.erase(it);
}

bool AddressSpace::reserve(uint64_t base, uint64_t size) {
  if (size == 0 || base > UINT64_MAX - size) return true;
  const uint64_t ps = pageSize();
  uint64_t first = base / ps * ps, last = (base + size - 1) / ps * ps;
  bool ok = takeEdge(first);
  if (last != first) ok &= takeEdge(last);
  if (last > first + ps) {
    if (mapNone(first + ps, last - first - ps)) interiors_[first + ps] = last - first - ps;
    else ok = false;
  }
  return ok;
}

void AddressSpace::release(uint64_t base, uint64_t size) {
  if (size == 0 || base > UINT64_MAX - size) return;
  const uint64_t ps = pageSize();
  uint64_t first = base / ps * ps, last = (base + size - 1) / ps * ps;
  // Only what reserve mapped: after a clash the pages stay the process's own.
  if (auto it = interiors_.find(first + ps); last > first + ps && it != interiors_.end()) {
    munmap(reinterpret_cast<void*>(it->first), it->second);
    interiors_.erase(it);
  }
  dropEdge(first);
  if (last != first) dropEdge(last);
}

}  // namespace gpool::client
