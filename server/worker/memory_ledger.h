// Where the lease's memory cap is enforced: every allocation path (plain, pitched, pools, VMM, managed)
// reserves its bytes here before the backend allocates, and returns them when the memory is freed.
// Module globals are the image's own and are not counted. One ledger per worker, shared by both backends.
// With the lease's shared budget (shared_budget.h), the cap holds across all the lease's workers: the
// processes of one program share it, as they share the GPU's memory. On sim, a device budget shared by
// every worker of the server stands for the device's memory (which is host memory there), so the host
// holds --sim-memory at most, not that much per worker.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "shared_budget.h"

#include "gpool/protocol/fields.h"
#include "gpool/protocol/status.h"

namespace gpool::worker {

// Budgets shared with other workers, and this worker's slot in them (gpool-server hands them out).
struct SharedLimits {
  std::shared_ptr<budget::SharedBudget> lease;   // the lease's cap, across its workers
  std::shared_ptr<budget::SharedBudget> device;  // sim: the device's memory, across the server's workers
  int slot = 0;
};

class MemoryLedger {
 public:
  // `limit`: the most device memory the lease may hold (the lease's cap, or the device's size).
  // `shared`: budgets this worker shares with others (none: this worker's own count only).
  explicit MemoryLedger(uint64_t limit = UINT64_MAX, SharedLimits shared = {})
      : limit_(shared.lease ? std::min(limit, shared.lease->limit()) : limit), shared_(std::move(shared)) {}

  // Holds `bytes` for an allocation about to be made: kOutOfMemory past the limit.
  proto::Status reserve(uint64_t bytes) {
    if (bytes > limit_ || used_ > limit_ - bytes) return proto::cu::kOutOfMemory;
    if (shared_.lease && !shared_.lease->reserve(shared_.slot, bytes)) return proto::cu::kOutOfMemory;
    if (shared_.device && !shared_.device->reserve(shared_.slot, bytes)) {
      if (shared_.lease) shared_.lease->release(shared_.slot, bytes);
      return proto::cu::kOutOfMemory;
    }
    used_ += bytes;
    return proto::cu::kSuccess;
  }
  // Gives back bytes reserved or allocated.
  void release(uint64_t bytes) {
    uint64_t n = std::min(used_, bytes);
    used_ -= n;
    for (auto* b : {shared_.lease.get(), shared_.device.get()})
      if (b) b->release(shared_.slot, n);
  }
  // Replaces a reservation by the size the backend actually allocated (a pitched allocation's real
  // pitch). The memory exists by now, so it is counted even where that passes the limit; reservations
  // are made large enough that it does not.
  void settle(uint64_t reserved, uint64_t actual) {
    if (actual <= reserved) return release(reserved - actual);
    used_ += actual - reserved;
    for (auto* b : {shared_.lease.get(), shared_.device.get()})
      if (b) b->add(shared_.slot, actual - reserved);
  }
  // Lowers what the device reports to what the lease sees: all its workers together, and on sim what
  // the device has left.
  void view(proto::MemView& m) const {
    m.total = std::min(m.total, limit_);
    uint64_t held = shared_.lease ? shared_.lease->used() : used_;
    m.free = std::min(m.free, m.total - std::min(m.total, held));
    if (const auto& d = shared_.device) m.free = std::min(m.free, d->limit() - std::min(d->limit(), d->used()));
  }

  // Memory the client freed that other processes still hold (import_holds.h): counted, even past the
  // limit, until they let go, and through a context reset.
  void keepFreed(uint64_t bytes) {
    kept_ += bytes;
    settle(0, bytes);
  }
  // Memory counted already (physical memory the client released while it still maps it) that importers now
  // hold: it stays counted, through a context reset too, until they let go.
  void keepCounted(uint64_t bytes) { kept_ += bytes; }
  void letGo(uint64_t bytes) {
    kept_ -= std::min(kept_, bytes);
    release(bytes);
  }

  // Everything this worker held is gone (a context reset), but for what importers hold.
  void clear() { release(used_ - std::min(used_, kept_)); }
  uint64_t used() const { return used_; }
  uint64_t limit() const { return limit_; }

 private:
  uint64_t limit_;
  uint64_t used_ = 0;  // this worker's part
  uint64_t kept_ = 0;  // of it, memory freed that importers hold
  SharedLimits shared_;
};

}  // namespace gpool::worker
