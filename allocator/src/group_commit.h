// Group commit (issue 16): the allocator's changes are written by one thread, many in one store
// transaction, while the scheduler goes on deciding. A change is staged, in order, with the scheduler's
// lock held; an answer is held back until everything staged before it was written (waitForStaged), so
// nothing a client was told can be lost by a crash. On etcd, where one transaction is a raft round and an
// fsync, this is what lets one leader serve 1,000 requests a second.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "store.h"

namespace gpool::allocator {

class GroupCommit {
 public:
  // `deposed`: called (from the writer's thread) when the store refuses a write because another
  // allocator leads it now.
  GroupCommit(Store& store, std::function<void()> deposed);
  ~GroupCommit();  // writes what was staged, then stops

  void stage(Changes c);  // with the scheduler's lock held: the order of stage() calls is the order written
  // Waits until everything staged so far is written. False after `timeout`, or when it never will be.
  bool waitForStaged(std::chrono::milliseconds timeout);
  // Runs `f` (a direct store call) between two of the writer's transactions.
  template <class F>
  auto direct(F&& f) {
    std::lock_guard lock(store_mu_);
    return f();
  }
  uint64_t transactions() const;  // written so far
  uint64_t changesWritten() const;
  // A write taking longer than kSlowMs holds every answer back meanwhile, heartbeats' included: that
  // time counts against no server and no lease. Whether one is that late now, and the milliseconds
  // past kSlowMs that writes took in all (rising; the tick forgives what it rose by).
  static constexpr int64_t kSlowMs = 250;
  bool stalled() const;
  int64_t stalledMs() const;

  static constexpr size_t kMaxRecords = 100;  // per transaction, under etcd's default --max-txn-ops (128)

 private:
  void loop();
  Changes next();  // with mu_ held: the staged changes for one transaction

  Store& store_;
  std::function<void()> deposed_;
  mutable std::mutex mu_;
  std::condition_variable staged_cv_, written_cv_;
  std::deque<Changes> pending_;
  uint64_t staged_ = 0, written_ = 0, transactions_ = 0;
  std::chrono::steady_clock::time_point writing_since_{};  // the write under way (epoch: none)
  int64_t stalled_ms_ = 0;
  bool stop_ = false, failed_ = false;
  std::mutex store_mu_;  // the store's connection: the writer's or a direct call's
  std::thread writer_;
};

}  // namespace gpool::allocator
