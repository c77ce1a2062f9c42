#include "elastic_pool.h"

#include <algorithm>
#include <system_error>
#include <thread>

namespace gpool::allocator {

void ElasticPool::enqueue(std::function<void()> fn) {
  std::unique_lock lock(mu_);
  jobs_.push_back(std::move(fn));
  if (jobs_.size() > idle_ && threads_ < max_) {
    try {
      std::thread([this] { run(); }).detach();
      ++threads_;
      return;
    } catch (const std::system_error&) {  // the system has no thread for us now: the job waits for one
      if (threads_ == 0) throw;
    }
  }
  work_.notify_one();
}

void ElasticPool::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_;
    bool got = work_.wait_for(lock, idle_exit_, [this] { return !jobs_.empty() || stopping_; });
    --idle_;
    if (jobs_.empty() && (stopping_ || !got)) break;  // nothing to do: this thread ends
    if (jobs_.empty()) continue;
    auto fn = std::move(jobs_.front());
    jobs_.pop_front();
    ++running_;
    lock.unlock();
    fn();
    lock.lock();
    --running_;
  }
  --threads_;
  ended_.notify_all();
}

void ElasticPool::shutdown() {
  std::unique_lock lock(mu_);
  stopping_ = true;
  work_.notify_all();
  ended_.wait(lock, [this] { return threads_ == 0; });
}

size_t ElasticPool::waiting() {
  std::lock_guard lock(mu_);
  return jobs_.size();
}

}  // namespace gpool::allocator
