// Where graph memory is counted: the allocations that graphs' allocation nodes make (cuGraphAddMemAllocNode,
// or cuMemAllocAsync inside a stream capture) and their free nodes.
//
// An allocation node's address is fixed when the node is made, and stays the client's while a graph or an
// instantiation holds the node, or while the allocation is live (allocated by a launch, not yet freed by a
// free node, cuMemFreeAsync or cuMemFree). The memory itself exists only while graphs run: the device keeps
// a reserve for graphs that grows at launches and shrinks when trimmed. The lease is charged that reserve,
// as the device reports it; a launch must first find room under the cap for what it may add to it (its
// allocations less what the reserve has free), or it fails with CUDA_ERROR_OUT_OF_MEMORY.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpool/protocol/status.h"
#include "handle_table.h"
#include "memory_ledger.h"

namespace gpool::worker {

class GraphMemory {
 public:
  GraphMemory(HandleTable& table, MemoryLedger& ledger) : table_(table), ledger_(ledger) {}

  // A graph gained an allocation node (its address and size) or a free node (of a graph allocation).
  void addAllocation(uint64_t graph, uint64_t ptr, uint64_t bytes);
  void addFree(uint64_t graph, uint64_t ptr);
  bool isAllocation(uint64_t ptr) const { return allocations_.count(ptr) != 0; }
  // The graph allocations a launch made and nothing freed yet.
  std::vector<uint64_t> live() const {
    std::vector<uint64_t> out;
    for (const auto& [ptr, a] : allocations_)
      if (a.live) out.push_back(ptr);
    return out;
  }

  // A clone or an instantiation holds what its graph holds; a destroyed graph or instantiation no longer does.
  void copyHolder(uint64_t from, uint64_t to);
  void release(uint64_t holder);

  // A launch of `exec`: room under the cap for what it may add to the reserve (`headroom`, held in the
  // ledger until settled), given the device's figures before it.
  proto::Status admitLaunch(uint64_t exec, uint64_t used, uint64_t reserved, uint64_t& headroom);
  // The launch went ahead: its allocations are live, what it frees is not.
  void launched(uint64_t exec);
  // Freed outside any graph (cuMemFreeAsync, cuMemFree): no longer live.
  void freed(uint64_t ptr);
  // The lease is charged the device's graph reserve now; `headroom` from admitLaunch is given back.
  void settle(uint64_t reserved, uint64_t headroom = 0);
  // Whether anything is tracked or charged (else there is nothing to settle).
  bool active() const { return !allocations_.empty() || charged_ != 0; }
  // A context reset: every graph and allocation is gone, and the ledger is cleared by its owner.
  void clear();
  // Addresses no longer the client's since last asked (no graph holds their node, none is live), so the
  // client may forget them too (GraphAllocationsGone).
  std::vector<uint64_t> takeGone() { return std::exchange(gone_, {}); }

 private:
  struct Allocation {
    uint64_t bytes = 0;
    uint32_t holders = 0;  // graphs and instantiations with its allocation node
    bool live = false;
  };
  struct Holder {
    std::vector<uint64_t> allocations, frees;
  };
  void forgetIfUnreachable(uint64_t ptr);

  HandleTable& table_;
  MemoryLedger& ledger_;
  std::unordered_map<uint64_t, Allocation> allocations_;  // by address
  std::unordered_map<uint64_t, Holder> holders_;          // by graph or instantiation
  uint64_t charged_ = 0;                                  // what the ledger holds for the reserve
  std::vector<uint64_t> gone_;
};

}  // namespace gpool::worker
