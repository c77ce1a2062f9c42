// Where the lease's memory cap is enforced: every allocation path (plain, pitched, pools, VMM, managed)
// reserves its bytes here before the backend allocates, and returns them when the memory is freed.
// Module globals are the image's own and are not counted. One ledger per worker, shared by both backends.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gpool/protocol/fields.h"
#include "gpool/protocol/status.h"

namespace gpool::worker {

class MemoryLedger {
 public:
  // `limit`: the most device memory the lease may hold (the lease's cap, or the device's size).
  explicit MemoryLedger(uint64_t limit = UINT64_MAX) : limit_(limit) {}

  // Holds `bytes` for an allocation about to be made: kOutOfMemory past the limit.
  proto::Status reserve(uint64_t bytes) {
    if (bytes > limit_ || used_ > limit_ - bytes) return proto::cu::kOutOfMemory;
    used_ += bytes;
    return proto::cu::kSuccess;
  }
  // Gives back bytes reserved or allocated.
  void release(uint64_t bytes) { used_ -= std::min(used_, bytes); }
  // Replaces a reservation by the size the backend actually allocated (a pitched allocation's real
  // pitch). The memory exists by now, so it is counted even where that passes the limit; reservations
  // are made large enough that it does not.
  void settle(uint64_t reserved, uint64_t actual) {
    if (actual <= reserved) release(reserved - actual);
    else used_ += actual - reserved;
  }
  // Lowers what the device reports to what the lease sees.
  void view(proto::MemView& m) const {
    m.total = std::min(m.total, limit_);
    m.free = std::min(m.free, m.total - std::min(m.total, used_));
  }

  // Everything the lease held is gone (a context reset).
  void clear() { used_ = 0; }
  uint64_t used() const { return used_; }
  uint64_t limit() const { return limit_; }

 private:
  uint64_t limit_;
  uint64_t used_ = 0;
};

}  // namespace gpool::worker
