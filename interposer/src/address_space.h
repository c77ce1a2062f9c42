// Keeps the device's addresses out of this process's own memory. Under unified addressing one process
// never has host and device memory at the same address, which is how cudaMemcpyDefault and pointer
// queries tell them apart; the device here is another process's (the worker's), so its allocations'
// pages are reserved here, inaccessible, and no host allocation can land on them. A device allocation
// that lies where this process already has memory is reported: its direction would be ambiguous.
#pragma once

#include <cstdint>
#include <unordered_map>

namespace gpool::client {

class AddressSpace {
 public:
  // Reserves the pages of [base, base+size); false when some of them are this process's memory already.
  bool reserve(uint64_t base, uint64_t size);
  // Gives back what reserve took for the same range.
  void release(uint64_t base, uint64_t size);

 private:
  struct Page {
    uint32_t users = 0;
    bool ours = false;  // reserved by us (not memory of the process's own)
  };
  // Device allocations never overlap, so only their first and last pages can be shared with another;
  // those are counted, the pages between them belong to one allocation.
  bool takeEdge(uint64_t page);
  void dropEdge(uint64_t page);
  std::unordered_map<uint64_t, Page> edges_;
  std::unordered_map<uint64_t, uint64_t> interiors_;  // first interior page -> bytes, where reserve mapped them
};

}  // namespace gpool::client
