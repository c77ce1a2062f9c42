// How a backend times the kernels and graphs it launches on the device, for the lease's compute share
// (compute_share.h). On a GPU: a pair of timing events around each launch, read once they completed;
// on the sim backend, which runs a kernel as it is launched: the host time of the launch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpool::worker {

class LaunchTimer {
 public:
  virtual ~LaunchTimer() = default;
  // Around one launch on `stream` (never a capturing one): marks its start before and its end after,
  // whether or not the device accepted it.
  virtual void startTiming(uint64_t stream) = 0;
  virtual void stopTiming(uint64_t stream) = 0;
  // The device time (ns) of marked launches that finished since the last call, and how many they were,
  // oldest first; when `wait_oldest`, first waits for the oldest still running. `running`: how many are
  // still running after.
  struct Finished {
    uint64_t busy_ns = 0;
    size_t launches = 0;
    size_t running = 0;
  };
  virtual Finished takeFinished(bool wait_oldest) = 0;
};

}  // namespace gpool::worker
