// Where a lease's compute share is enforced (docs/admin.md, "Compute shares"). A lease of fraction f < 1
// may keep the device busy with its kernels and graphs for at most f of the time, measured on the device
// (launch_timer.h) and charged to the lease's pace, which all its workers share (compute_pace.h). Before
// each launch the worker
//   - charges the launches that finished since the last one;
//   - keeps at most about kAheadNs of device work unmeasured (running or queued): beyond that it waits
//     for the oldest to finish, so a lease cannot queue seconds of work before any of it is charged;
//   - waits while the lease's pace is ahead of now.
// Over any span of time T a lease's kernels thus run at most f × (T + kBurstNs), plus what was queued
// unmeasured: after idling, a lease of 0.5 runs at full speed for 100 ms, then at half.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "compute_pace.h"
#include "launch_timer.h"

namespace gpool::worker {

class ComputeShare {
 public:
  static constexpr int64_t kBurstNs = 100'000'000;  // idle time counts for at most 100 ms
  static constexpr int64_t kAheadNs = 2'000'000;    // at most about 2 ms of device work not yet charged
  using Clock = std::function<int64_t()>;           // CLOCK_MONOTONIC ns
  using Sleep = std::function<void(int64_t ns)>;

  // `share` in (0, 1). `now` and `sleep` default to the host's (tests give a virtual clock).
  ComputeShare(double share, std::shared_ptr<budget::ComputePace> pace, LaunchTimer& timer, Clock now = {}, Sleep sleep = {});

  // Around each kernel or graph launch on a stream that is not capturing.
  void beforeLaunch(uint64_t stream);
  void afterLaunch(uint64_t stream) { timer_.stopTiming(stream); }

  double share() const { return share_; }
  // What was enforced so far, for the worker's log at exit.
  int64_t chargedNs() const { return charged_ns_; }
  int64_t pacedNs() const { return paced_ns_; }

 private:
  // Charges what finished (waiting for the oldest when `wait_oldest`); returns how many launches still run.
  size_t charge(bool wait_oldest);
  size_t runningLimit() const;

  double share_;
  std::shared_ptr<budget::ComputePace> pace_;
  LaunchTimer& timer_;
  Clock now_;
  Sleep sleep_;
  double average_ns_ = 0;  // of one launch, measured (0: none measured yet)
  int64_t charged_ns_ = 0, paced_ns_ = 0;
};

}  // namespace gpool::worker
