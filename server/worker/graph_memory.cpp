// Graph memory's addresses and charge (graph_memory.h).
#include "graph_memory.h"

#include <algorithm>

namespace gpool::worker {

void GraphMemory::addAllocation(uint64_t graph, uint64_t ptr, uint64_t bytes) {
  std::erase(gone_, ptr);  // the client's again before it heard it was gone
  Allocation& a = allocations_[ptr];
  a.bytes = bytes;
  ++a.holders;
  holders_[graph].allocations.push_back(ptr);
  table_.addRange(DeviceRange{ptr, bytes, RangeKind::kGraphMemory, 0});
}

void GraphMemory::addFree(uint64_t graph, uint64_t ptr) { holders_[graph].frees.push_back(ptr); }

void GraphMemory::copyHolder(uint64_t from, uint64_t to) {
  auto it = holders_.find(from);
  if (it == holders_.end()) return;
  Holder copy = it->second;
  for (uint64_t ptr : copy.allocations) ++allocations_.at(ptr).holders;
  Holder& h = holders_[to];
  h.allocations.insert(h.allocations.end(), copy.allocations.begin(), copy.allocations.end());
  h.frees.insert(h.frees.end(), copy.frees.begin(), copy.frees.end());
}

void GraphMemory::release(uint64_t holder) {
  auto it = holders_.find(holder);
  if (it == holders_.end()) return;
  std::vector<uint64_t> held = std::move(it->second.allocations);
  holders_.erase(it);
  for (uint64_t ptr : held) {
    --allocations_.at(ptr).holders;
    forgetIfUnreachable(ptr);
  }
}

proto::Status GraphMemory::admitLaunch(uint64_t exec, uint64_t used, uint64_t reserved, uint64_t& headroom) {
  headroom = 0;
  auto it = holders_.find(exec);
  if (it == holders_.end()) return proto::cu::kSuccess;
  uint64_t need = 0;
  for (uint64_t ptr : it->second.allocations) need += allocations_.at(ptr).bytes;
  const uint64_t spare = reserved - std::min(reserved, used);
  if (need <= spare) return proto::cu::kSuccess;
  if (proto::Status st = ledger_.reserve(need - spare); st != proto::cu::kSuccess) return st;
  headroom = need - spare;
  return proto::cu::kSuccess;
}

void GraphMemory::launched(uint64_t exec) {
  auto it = holders_.find(exec);
  if (it == holders_.end()) return;
  for (uint64_t ptr : it->second.allocations) allocations_.at(ptr).live = true;
  for (uint64_t ptr : it->second.frees) freed(ptr);
}

void GraphMemory::freed(uint64_t ptr) {
  auto it = allocations_.find(ptr);
  if (it == allocations_.end()) return;
  it->second.live = false;
  forgetIfUnreachable(ptr);
}

void GraphMemory::forgetIfUnreachable(uint64_t ptr) {
  auto it = allocations_.find(ptr);
  if (it == allocations_.end() || it->second.holders != 0 || it->second.live) return;
  allocations_.erase(it);
  table_.removeRange(ptr);
  gone_.push_back(ptr);
}

void GraphMemory::settle(uint64_t reserved, uint64_t headroom) {
  ledger_.settle(charged_, reserved);  // the reserve may pass the cap by what fragmentation adds; it is counted
  charged_ = reserved;
  ledger_.release(headroom);
}

void GraphMemory::clear() {
  gone_.clear();  // the client forgets everything at a reset itself
  allocations_.clear();
  holders_.clear();
  charged_ = 0;
}

}  // namespace gpool::worker
