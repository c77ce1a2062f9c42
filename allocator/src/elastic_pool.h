// The HTTP server's threads. Each connection is served on one thread for its whole life
// (tcp_listener.h), so a long poll or a slow client holds a thread: this pool makes a thread whenever
// every thread is busy, up to a maximum, and ends threads idle for a while. Thousands of slow connections
// or long polls then leave threads for status probes and heartbeats (a fixed pool of 64 stopped answering
// at about 70).
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

namespace gpool::allocator {

//
// Each job is one accepted connection, holding a descriptor until it ends. `max_open` bounds the jobs
// held, running or waiting: at the bound, enqueue (called by httplib's accept loop) waits until one
// ends, so the loop stops accepting and new connections wait in the kernel's listen backlog. The
// process never reaches its descriptor limit, where accept would fail and retry every millisecond.
class ElasticPool : public httplib::TaskQueue {
 public:
  explicit ElasticPool(size_t max_threads, size_t max_open = SIZE_MAX,
                       std::chrono::milliseconds idle_exit = std::chrono::seconds(30))
      : max_(max_threads), max_open_(max_open), idle_exit_(idle_exit) {}
  ~ElasticPool() override { shutdown(); }
  // Runs `fn` on an idle thread, or a new one; past the maximum it waits for a thread to finish. With
  // `max_open` jobs held already, it first waits for one to end.
  void enqueue(std::function<void()> fn) override;
  // Lets queued work finish, then waits for every thread to end.
  void shutdown() override;
  // The connections the open-file limit (RLIMIT_NOFILE) leaves room for, beside what the allocator
  // keeps open otherwise: the database, keys, logs, munged, the local socket's connections.
  static size_t descriptorBudget();
  static constexpr size_t kReservedDescriptors = 64 + 256, kMinBudget = 16;

  size_t waiting();  // jobs no thread has taken yet

 private:
  void run();
  std::mutex mu_;
  std::condition_variable work_, ended_, room_;
  std::deque<std::function<void()>> jobs_;
  size_t max_, max_open_, threads_ = 0, idle_ = 0, running_ = 0;
  std::chrono::milliseconds idle_exit_;
  bool stopping_ = false;
};

}  // namespace gpool::allocator
