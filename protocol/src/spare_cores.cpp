// The host's idle CPU time, sampled from /proc/stat (spare_cores.h).
#include "spare_cores.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace gpool::proto {
namespace {

constexpr auto kPeriod = std::chrono::milliseconds(50);

struct Sample {
  uint64_t idle = 0, total = 0;  // clock ticks, all CPUs together
};

bool read(Sample& s) {
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return false;
  unsigned long long v[8] = {};  // user nice system idle iowait irq softirq steal
  int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
  std::fclose(f);
  if (n < 5) return false;
  s.idle = v[3] + v[4];
  s.total = 0;
  for (int i = 0; i < n; ++i) s.total += v[i];
  return true;
}

std::atomic<bool> spare{true};
std::atomic<int64_t> next_ns{0};  // when to sample again (steady clock)
std::atomic<bool> sampling{false};
Sample last;  // written only by the thread holding `sampling`

}  // namespace

bool hostHasSpareCores() {
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  if (now < next_ns.load(std::memory_order_relaxed) || sampling.exchange(true, std::memory_order_acquire))
    return spare.load(std::memory_order_relaxed);
  Sample s;
  if (read(s) && s.total > last.total) {
    static const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const double idle_cores = static_cast<double>(s.idle - last.idle) / static_cast<double>(s.total - last.total) *
                              static_cast<double>(cores > 0 ? cores : 1);
    if (last.total) spare.store(idle_cores >= 0.5, std::memory_order_relaxed);
    last = s;
  }
  next_ns.store(now + std::chrono::nanoseconds(kPeriod).count(), std::memory_order_relaxed);
  sampling.store(false, std::memory_order_release);
  return spare.load(std::memory_order_relaxed);
}

}  // namespace gpool::proto
