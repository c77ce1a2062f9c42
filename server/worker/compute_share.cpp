#include "compute_share.h"

#include <time.h>

#include <algorithm>
#include <utility>

namespace gpool::worker {
namespace {

int64_t monotonicNs() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

void sleepNs(int64_t ns) {
  timespec t{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  ::nanosleep(&t, nullptr);
}

constexpr int64_t kLongestSleepNs = 50'000'000;  // then charge what finished meanwhile and look again

}  // namespace

ComputeShare::ComputeShare(double share, std::shared_ptr<budget::ComputePace> pace, LaunchTimer& timer, Clock now, Sleep sleep)
    : share_(share), pace_(std::move(pace)), timer_(timer), now_(now ? std::move(now) : Clock(monotonicNs)),
      sleep_(sleep ? std::move(sleep) : Sleep(sleepNs)) {}

size_t ComputeShare::charge(bool wait_oldest) {
  LaunchTimer::Finished f = timer_.takeFinished(wait_oldest);
  if (f.launches) {
    pace_->charge(static_cast<int64_t>(f.busy_ns), share_, now_(), kBurstNs);
    charged_ns_ += static_cast<int64_t>(f.busy_ns);
    const double each = static_cast<double>(f.busy_ns) / static_cast<double>(f.launches);
    average_ns_ = average_ns_ == 0 ? each : 0.8 * average_ns_ + 0.2 * each;
  }
  return f.running;
}

// Until a launch was measured, one at a time; then as many as make about kAheadNs.
size_t ComputeShare::runningLimit() const {
  if (average_ns_ <= 0) return 1;
  return static_cast<size_t>(std::clamp(static_cast<double>(kAheadNs) / average_ns_, 1.0, 4096.0));
}

void ComputeShare::beforeLaunch(uint64_t stream) {
  for (size_t running = charge(false); running >= runningLimit();) running = charge(true);
  for (int64_t ahead; (ahead = pace_->paidUntil() - now_()) > 0;) {
    const int64_t nap = std::min(ahead, kLongestSleepNs);
    sleep_(nap);
    paced_ns_ += nap;
    pace_->waited(nap);
    charge(false);
  }
  timer_.startTiming(stream);
}

}  // namespace gpool::worker
