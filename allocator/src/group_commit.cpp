// Group commit (group_commit.h).
#include "group_commit.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace gpool::allocator {

GroupCommit::GroupCommit(Store& store, std::function<void()> deposed) : store_(store), deposed_(std::move(deposed)) {
  writer_ = std::thread([this] { loop(); });
}

GroupCommit::~GroupCommit() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  staged_cv_.notify_all();
  writer_.join();
}

void GroupCommit::stage(Changes c) {
  if (c.empty()) return;
  {
    std::lock_guard lock(mu_);
    pending_.push_back(std::move(c));
    ++staged_;
  }
  staged_cv_.notify_one();
}

bool GroupCommit::waitForStaged(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  const uint64_t target = staged_;
  return written_cv_.wait_for(lock, timeout, [&] { return written_ >= target || failed_; }) && !failed_;
}

uint64_t GroupCommit::transactions() const {
  std::lock_guard lock(mu_);
  return transactions_;
}

uint64_t GroupCommit::changesWritten() const {
  std::lock_guard lock(mu_);
  return written_;
}

bool GroupCommit::stalled() const {
  std::lock_guard lock(mu_);
  return writing_since_ != std::chrono::steady_clock::time_point{} &&
         std::chrono::steady_clock::now() - writing_since_ > std::chrono::milliseconds(kSlowMs);
}

int64_t GroupCommit::stalledMs() const {
  std::lock_guard lock(mu_);
  return stalled_ms_;
}

// Whole changes, oldest first, as many as fit in one transaction (one alone when it is larger).
Changes GroupCommit::next() {
  Changes batch = std::move(pending_.front());
  pending_.pop_front();
  while (!pending_.empty() && batch.size() + pending_.front().size() <= kMaxRecords) {
    batch.add(std::move(pending_.front()));
    pending_.pop_front();
  }
  return batch;
}

// A write that fails is tried again until it succeeds: the state held here and the store's stay one.
// If the store stays out of reach, this allocator's lead lapses and it starts again from the store.
void GroupCommit::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    staged_cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    if (pending_.empty()) return;
    const size_t before = pending_.size();
    Changes batch = next();
    const uint64_t upto = written_ + (before - pending_.size());
    writing_since_ = std::chrono::steady_clock::now();
    lock.unlock();
    for (int attempt = 0;; ++attempt) {
      try {
        std::lock_guard store_lock(store_mu_);
        store_.write(batch);
        break;
      } catch (const StoreDeposed& e) {
        spdlog::critical("{}", e.what());
        lock.lock();
        failed_ = true;
        written_cv_.notify_all();
        lock.unlock();
        deposed_();
        return;
      } catch (const std::exception& e) {
        if (attempt % 10 == 0) spdlog::error("writing {} records to the store: {}; trying again", batch.size(), e.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    lock.lock();
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - writing_since_).count();
    stalled_ms_ += std::max<int64_t>(0, took - kSlowMs);
    writing_since_ = {};
    written_ = upto;
    ++transactions_;
    written_cv_.notify_all();
  }
}

}  // namespace gpool::allocator
