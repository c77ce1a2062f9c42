// The wait queue and its grant order (wait_queue.h).
#include "wait_queue.h"

#include <algorithm>

#include "fair_share.h"
#include "scheduler.h"

namespace gpool::allocator {

WaitQueue::Bucket WaitQueue::bucketOf(const Lease& l) { return {l.req.pool, l.queue, l.req.n * l.req.p}; }

void WaitQueue::add(Lease& l) {
  Entry e{-l.priority, l.order_key, l.seq, &l};
  if (!all_.insert(e).second) return;
  buckets_[bucketOf(l)].insert(e);
  ++in_pool_[l.req.pool];
}

void WaitQueue::remove(Lease& l) {
  Entry e{-l.priority, l.order_key, l.seq, &l};
  if (!all_.erase(e)) return;
  // A bucket left empty goes: no GrantOrder walks it (its last lease was the one returned).
  if (auto b = buckets_.find(bucketOf(l)); b != buckets_.end() && b->second.erase(e) && b->second.empty()) buckets_.erase(b);
  if (auto p = in_pool_.find(l.req.pool); p != in_pool_.end() && --p->second <= 0) in_pool_.erase(p);
}

void WaitQueue::clear() {
  all_.clear();
  buckets_.clear();
  in_pool_.clear();
}

int WaitQueue::queuedIn(const std::string& pool) const {
  auto it = in_pool_.find(pool);
  return it == in_pool_.end() ? 0 : it->second;
}

int WaitQueue::position(const Lease& l) const {
  if (!all_.count({-l.priority, l.order_key, l.seq, const_cast<Lease*>(&l)})) return 0;
  // Asked for every queued answer, mostly for the newest request: walked from both ends at once, so it
  // costs as many steps as the request is from the nearer end.
  int before = 0, after = 0;
  auto front = all_.begin();
  auto back = all_.rbegin();
  for (;;) {
    const Lease* f = leaseOf(*front++);
    if (f == &l) return before + 1;
    before += f->req.pool == l.req.pool;
    const Lease* r = leaseOf(*back++);
    if (r == &l) break;
    after += r->req.pool == l.req.pool;
  }
  return queuedIn(l.req.pool) - after;
}

WaitQueue::GrantOrder::GrantOrder(const WaitQueue& q, const FairShare& fair) : fair_(fair) {
  heap_.reserve(q.buckets_.size());
  for (const auto& [bucket, entries] : q.buckets_)
    heap_.push_back(Head{0, std::get<1>(bucket), std::get<2>(bucket), entries.begin(), entries.end()});
  regrade();
}

bool WaitQueue::GrantOrder::after(const Head& a, const Head& b) {
  if (a.rank != b.rank) return a.rank > b.rank;
  return *b.at < *a.at;  // priority, then arrival
}

void WaitQueue::GrantOrder::regrade() {
  if (fair_.active())  // without queues every rank is 0: priority order
    for (Head& h : heap_) h.rank = fair_.beyondGuarantee(h.queue, h.gpus);
  std::make_heap(heap_.begin(), heap_.end(), after);
}

Lease* WaitQueue::GrantOrder::next() {
  if (heap_.empty()) return nullptr;
  std::pop_heap(heap_.begin(), heap_.end(), after);
  Head& h = heap_.back();
  Lease* l = leaseOf(*h.at);
  if (++h.at == h.end) heap_.pop_back();  // moved past it first, so it may leave its bucket
  else std::push_heap(heap_.begin(), heap_.end(), after);
  return l;
}

}  // namespace gpool::allocator
