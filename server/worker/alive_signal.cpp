// The worker's liveness frames (alive_signal.h).
#include "alive_signal.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"

namespace gpool::worker {

AliveSignal::~AliveSignal() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AliveSignal::start(uint32_t interval_ms) {
  interval_ms = std::clamp(interval_ms, proto::kMinAliveIntervalMs, proto::kMaxAliveIntervalMs);
  {
    std::lock_guard lock(mu_);
    interval_ = std::chrono::milliseconds(interval_ms);
  }
  wake_.notify_all();
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

// Every interval: if the dispatcher is inside a frame, or began one since the last tick, say so. An idle
// worker (the client quiet between calls) sends nothing, so an idle client's socket does not fill up.
void AliveSignal::loop() {
  uint64_t seen = frames_.load(std::memory_order_relaxed);
  std::unique_lock lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, interval_, [this] { return stop_; });
    if (stop_) break;
    uint64_t now = frames_.load(std::memory_order_relaxed);
    if (now == seen && !busy_.load(std::memory_order_relaxed)) continue;
    seen = now;
    try {
      std::lock_guard send(send_mu_);
      proto::sendFrame(*transport_, proto::kMsgAlive, 0, 0, nullptr, 0);
    } catch (const std::exception& e) {
      spdlog::debug("stopped signalling liveness: {}", e.what());  // the dispatcher sees the broken connection
      break;
    }
  }
}

}  // namespace gpool::worker
