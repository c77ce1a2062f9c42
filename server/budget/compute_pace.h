// A lease's compute pace, shared by all its workers (compute_share.h enforces the share with it): the
// time, on CLOCK_MONOTONIC (the same in every process of a host), until which the device time the lease
// has used is paid for at its share. Kernels that ran for T cost T / share of wall time; a lease may run
// while that time is not ahead of now. After the lease was idle, the pace starts at most `burst` before now,
// so over any span of time T the lease's kernels run at most share × (T + burst).
//
// gpool-server makes one per lease with a fraction below 1 and hands its descriptor to each worker of the
// lease (as with shared_budget.h); a worker that dies leaves what it charged, which was used.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace gpool::budget {

class ComputePace {
 public:
  // A new pace (gpool-server). Throws std::runtime_error when it cannot be made.
  static std::shared_ptr<ComputePace> create();
  // The pace whose descriptor a worker inherited. Throws std::runtime_error for a descriptor that is not one.
  static std::shared_ptr<ComputePace> adopt(int fd);
  ~ComputePace();
  ComputePace(const ComputePace&) = delete;
  ComputePace& operator=(const ComputePace&) = delete;

  int fd() const { return fd_; }
  // Charges `busy_ns` of device time at `share` (0 < share <= 1), at time `now_ns`.
  void charge(int64_t busy_ns, double share, int64_t now_ns, int64_t burst_ns);
  // Until when (CLOCK_MONOTONIC ns) the device time used so far is paid for; at most now, the lease may run.
  int64_t paidUntil() const;
  // A worker held a launch back `ns` for the share (compute_share.h).
  void waited(int64_t ns);
  // What all the lease's workers did, for gpool-server's /metrics: device time charged, time held back.
  int64_t busyNs() const;
  int64_t waitedNs() const;

 private:
  struct Page;
  ComputePace(int fd, Page* page) : fd_(fd), page_(page) {}
  int fd_;
  Page* page_;
};

}  // namespace gpool::budget
