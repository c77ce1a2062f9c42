// The threads gpool-allocator answers TCP requests on. A connection takes a thread only while one of its
// requests is answered (request_gate.h), but a long poll holds it until its answer: this pool makes a
// thread whenever every thread is busy, up to a maximum, and ends threads idle for a while. Thousands of
// long polls then leave threads for status probes and heartbeats (a fixed pool of 64 stopped answering
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

// Each job is one request. enqueue never waits: past the maximum, a job waits for a thread to finish.
class ElasticPool : public httplib::TaskQueue {
 public:
  explicit ElasticPool(size_t max_threads, std::chrono::milliseconds idle_exit = std::chrono::seconds(30))
      : max_(max_threads), idle_exit_(idle_exit) {}
  ~ElasticPool() override { shutdown(); }
  // Runs `fn` on an idle thread, or a new one; past the maximum it waits for a thread to finish.
  void enqueue(std::function<void()> fn) override;
  // Lets queued work finish, then waits for every thread to end.
  void shutdown() override;

  size_t waiting();  // jobs no thread has taken yet

 private:
  void run();
  std::mutex mu_;
  std::condition_variable work_, ended_;
  std::deque<std::function<void()>> jobs_;
  size_t max_, threads_ = 0, idle_ = 0, running_ = 0;
  std::chrono::milliseconds idle_exit_;
  bool stopping_ = false;
};

}  // namespace gpool::allocator
