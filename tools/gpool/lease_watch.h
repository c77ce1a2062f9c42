// Keeps a granted lease alive and watches it, on a thread with a client of its own: heartbeats when they
// are due and, between them, a long poll on the lease, so preemption notice reaches the launcher within
// moments of the allocator giving it. Reports notice, its withdrawal, and the lease's end. Each heartbeat
// carries the job's progress, where it writes some (GPOOL_PROGRESS_FILE: one number, how far it got).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "allocator_client.h"
#include "gpool/allocator/notices.h"

namespace gpool::cli {

class LeaseWatch {
 public:
  struct Events {
    // The lease is being preempted: its shares are revoked in `in_ms`, for request `for_request`.
    // Notice: the lease's GPUs are revoked in `in_ms`, for `why` (its kind; `for_request` says more).
    std::function<void(int64_t in_ms, gpool::allocator::Notice why, const std::string& for_request)> notice;
    std::function<void()> withdrawn;                        // the notice was withdrawn
    std::function<void(const std::string& reason)> ended;  // the allocator ended the lease
    // The lease's shares with new tokens (the heartbeats renew them): the holder's JSON "shares".
    std::function<void(const nlohmann::json& shares)> shares;
  };
  LeaseWatch(std::unique_ptr<AllocatorClient> client, std::string id, int heartbeat_ms, Events events,
             std::string progress_file = "");
  // Stops watching. Release the lease first: that ends a long poll at once.
  ~LeaseWatch();
  LeaseWatch(const LeaseWatch&) = delete;
  LeaseWatch& operator=(const LeaseWatch&) = delete;

 private:
  void loop();
  bool see(int status, const std::string& text);  // reads an answer; false once the lease has ended
  bool pause(int ms);                              // sleeps unless stopped; false when stopped
  // Says once when the allocator stops answering (status 0: `why`), and once when it answers again.
  void reached(int status, const std::string& why);
  std::string heartbeatBody() const;               // {"progress": N} when the progress file holds a number

  std::unique_ptr<AllocatorClient> a_;
  std::string id_;
  int every_ms_;
  Events events_;
  std::string progress_file_;
  bool noticed_ = false;
  nlohmann::json shares_;  // as last reported
  std::optional<std::chrono::steady_clock::time_point> away_since_;  // when it last stopped answering
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace gpool::cli
