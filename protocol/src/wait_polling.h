// How long a transport's wait polls (TCP) or spins (shared memory) before it sleeps. Polling saves the
// wake-up of a sleeping thread, on an idle machine most of a loopback round trip, but it takes a core:
// - a wait polls about twice as long as the connection's last wait took, at most GPOOL_SPIN_US (50 µs),
//   and half as long after a wait that outlasted that, so a connection that waits long (a host-function
//   channel, a worker whose client computes) stops polling;
// - no wait polls while the host's cores are all busy (spare_cores.h), where waking is quick anyway and
//   polling only takes time from the threads that would answer. That also keeps the yields a polling wait
//   makes (so that, on few cores, the thread that answers can run) from handing busy processes a time
//   slice each: beside two busy loops, a round trip between two threads of one process took over a
//   millisecond that way.
// docs/performance.md has the measurements behind each rule.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>

#include "spare_cores.h"

namespace gpool::proto {

class WaitPolling {
 public:
  using Clock = std::chrono::steady_clock;

  // How long the next wait may poll (zero: sleep at once).
  std::chrono::nanoseconds budget() const {
    std::chrono::nanoseconds next(next_ns_.load(std::memory_order_relaxed));
    return next.count() > 0 && hostHasSpareCores() ? next : std::chrono::nanoseconds(0);
  }
  // A wait ended after `waited` (polling or sleeping). (Waits of two threads, one sending and one
  // receiving, may end at once: the last word wins.)
  void waited(Clock::duration waited) {
    std::chrono::nanoseconds next(next_ns_.load(std::memory_order_relaxed));
    if (waited <= limit()) next = std::clamp<std::chrono::nanoseconds>(2 * waited, std::chrono::microseconds(2), limit());
    else next /= 2;
    next_ns_.store(next.count(), std::memory_order_relaxed);
  }

  // GPOOL_SPIN_US (0: never poll; at most 10000), else 50 µs.
  static std::chrono::nanoseconds limit() {
    static const std::chrono::nanoseconds l = [] {
      const char* v = std::getenv("GPOOL_SPIN_US");
      long us = v && *v ? std::strtol(v, nullptr, 10) : 50;
      return std::chrono::nanoseconds(std::chrono::microseconds(std::clamp(us, 0L, 10000L)));
    }();
    return l;
  }

 private:
  std::atomic<int64_t> next_ns_{limit().count()};
};

}  // namespace gpool::proto
