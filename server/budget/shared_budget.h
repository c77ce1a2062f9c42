// A byte budget shared by processes (where a lease's memory cap holds across all its workers, and the sim
// backend's memory across a whole server): one memfd page holding the limit, the total in use and one slot
// per process. gpool-server creates it and hands its descriptor to each worker with a slot number; a worker
// reserves and releases bytes; when a worker ends, however it ends, the server takes back what its slot
// held (the driver freed that memory with the process).
//
// Each update changes the total first on reserve and the slot first on release, so a process killed
// between the two leaves the total too high, never too low: the budget errs toward refusing.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace gpool::budget {

class SharedBudget {
 public:
  static constexpr int kSlots = 256;
  static constexpr int kLowestFd = 10;  // what create() makes is at least this: spawning can dup2 it to 4, 5 safely

  // A new budget of `limit` bytes (gpool-server). Throws std::runtime_error when it cannot be made.
  static std::shared_ptr<SharedBudget> create(uint64_t limit);
  // The budget whose descriptor a worker inherited. Throws std::runtime_error for a descriptor that is not one.
  static std::shared_ptr<SharedBudget> adopt(int fd);
  ~SharedBudget();
  SharedBudget(const SharedBudget&) = delete;
  SharedBudget& operator=(const SharedBudget&) = delete;

  int fd() const { return fd_; }
  uint64_t limit() const;
  uint64_t used() const;

  // Holds `bytes` for the process in `slot`; false (nothing held) when the total would pass the limit.
  bool reserve(int slot, uint64_t bytes);
  void release(int slot, uint64_t bytes);
  // Counts `bytes` that exist already (an allocation larger than reserved), even past the limit.
  void add(int slot, uint64_t bytes);
  // The process in `slot` ended: what it held is free again; or all but `bytes` of it, which stay held in
  // the slot (memory that outlives the process: the server's held_exports.h).
  void reclaim(int slot);
  void reclaimAllBut(int slot, uint64_t bytes);
  uint64_t heldBy(int slot) const;

 private:
  struct Page;
  SharedBudget(int fd, Page* page) : fd_(fd), page_(page) {}
  int fd_;
  Page* page_;
};

}  // namespace gpool::budget
