// Where the worker proves to its client that it still runs (protocol 2.2, kMsgAlive): once the client asks
// for an interval, a thread of its own sends an empty kMsgAlive frame every interval while the dispatcher
// handles frames. A worker busy with a long call keeps talking; a stopped one (SIGSTOP, a frozen host)
// falls silent, and its client gives up after its own bound instead of waiting forever.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "gpool/protocol/transport.h"

namespace gpool::worker {

class AliveSignal {
 public:
  explicit AliveSignal(proto::Transport& transport) : transport_(&transport) {}
  ~AliveSignal();
  AliveSignal(const AliveSignal&) = delete;
  AliveSignal& operator=(const AliveSignal&) = delete;

  // The client's request: signal every `interval_ms` (clamped to the protocol's bounds) from now on.
  void start(uint32_t interval_ms);
  // The dispatcher is handling a frame (begin) or waiting for the next one (end).
  void begin() {
    busy_.store(true, std::memory_order_relaxed);
    frames_.fetch_add(1, std::memory_order_relaxed);
  }
  void end() { busy_.store(false, std::memory_order_relaxed); }
  // Held across every reply the dispatcher sends, so a kMsgAlive frame never lands inside one.
  std::unique_lock<std::mutex> replyLock() { return std::unique_lock(send_mu_); }
  // The connection moved to another transport (transport_switch.h): frames go there from now on.
  void use(proto::Transport& transport) {
    std::lock_guard lock(send_mu_);
    transport_ = &transport;
  }

 private:
  void loop();

  proto::Transport* transport_;  // guarded by send_mu_
  std::mutex send_mu_;
  std::atomic<bool> busy_{false};
  std::atomic<uint64_t> frames_{0};  // frames begun: progress since the last tick counts as work
  std::mutex mu_;
  std::condition_variable wake_;
  std::chrono::milliseconds interval_{0};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpool::worker
