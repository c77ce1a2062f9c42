#include "compute_pace.h"

#include <algorithm>
#include <new>

#include "shared_budget.h"
#include "shared_page.h"

namespace gpool::budget {

struct ComputePace::Page {
  static constexpr uint64_t kMagic = 0x67706f6f6c706163ull;  // "gpoolpac"
  uint64_t magic;
  std::atomic<int64_t> paid_until;
  std::atomic<int64_t> busy_ns, waited_ns;  // totals, as counters
};
static_assert(std::atomic<int64_t>::is_always_lock_free, "the pace is shared between processes");

std::shared_ptr<ComputePace> ComputePace::create() {
  int fd = -1;
  void* p = createSharedPage(sizeof(Page), SharedBudget::kLowestFd, "compute pace", fd);
  return std::shared_ptr<ComputePace>(new ComputePace(fd, new (p) Page{Page::kMagic, {0}, {0}, {0}}));
}

std::shared_ptr<ComputePace> ComputePace::adopt(int fd) {
  return std::shared_ptr<ComputePace>(new ComputePace(fd, static_cast<Page*>(adoptSharedPage(fd, sizeof(Page), Page::kMagic, "compute pace"))));
}

ComputePace::~ComputePace() { releaseSharedPage(page_, sizeof(Page), fd_); }

void ComputePace::charge(int64_t busy_ns, double share, int64_t now_ns, int64_t burst_ns) {
  if (busy_ns <= 0 || !(share > 0)) return;
  page_->busy_ns.fetch_add(busy_ns, std::memory_order_relaxed);
  const auto cost = static_cast<int64_t>(static_cast<double>(busy_ns) / std::min(share, 1.0));
  int64_t was = page_->paid_until.load();
  while (!page_->paid_until.compare_exchange_weak(was, std::max(was, now_ns - burst_ns) + cost)) {
  }
}

int64_t ComputePace::paidUntil() const { return page_->paid_until.load(); }

void ComputePace::waited(int64_t ns) {
  if (ns > 0) page_->waited_ns.fetch_add(ns, std::memory_order_relaxed);
}

int64_t ComputePace::busyNs() const { return page_->busy_ns.load(std::memory_order_relaxed); }
int64_t ComputePace::waitedNs() const { return page_->waited_ns.load(std::memory_order_relaxed); }

}  // namespace gpool::budget
