// The allocator's wait queue: queued requests in priority order (then arrival), and the grant order
// among queues that the scheduler tries them in (fair_share.h): a request's place depends on how far
// beyond its queue's guarantee it would take that queue, which changes with every grant. The queue is
// kept in buckets of requests that always rank alike (one pool, one queue, one size), so the grant order
// is a merge of the buckets' heads: each step costs the number of buckets, not a sort of the queue.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace gpool::allocator {

struct Lease;
class FairShare;

class WaitQueue {
 public:
  // (-priority, the pool's order key (Lease::order_key), arrival, the lease): priority order, then the
  // pool's order (first come, shortest first, least attained service first), then arrival.
  using Entry = std::tuple<int, double, uint64_t, Lease*>;
  using Entries = std::set<Entry>;  // arrival is unique: the pointers are never compared
  static Lease* leaseOf(const Entry& e) { return std::get<3>(e); }

  // A lease enters with its priority, order key, seq, pool, queue and size as they are; it must leave
  // before any of them changes (and enter again after).
  void add(Lease& l);
  void remove(Lease& l);
  void clear();

  size_t size() const { return all_.size(); }
  const Entries& entries() const { return all_; }  // priority order
  int queuedIn(const std::string& pool) const;
  // Pools with requests queued, and how many.
  const std::map<std::string, int>& pools() const { return in_pool_; }
  // 1-based position of a queued lease among its pool's, in priority order.
  int position(const Lease& l) const;

  // Walks the queue in grant order: within guarantee first, then the queue least beyond its guarantee
  // for its weight; within those, priority order. regrade() after each grant (what queues hold changed).
  class GrantOrder {
   public:
    GrantOrder(const WaitQueue& q, const FairShare& fair);
    // The next lease, nullptr after the last. The lease returned may leave the queue before the next
    // call (granted, ended); no other may.
    Lease* next();
    void regrade();

   private:
    struct Head {
      double rank;  // FairShare::beyondGuarantee of the bucket's queue and size
      int queue;
      double gpus;
      Entries::const_iterator at, end;
    };
    static bool after(const Head& a, const Head& b);  // heap order: a comes after b
    const FairShare& fair_;
    std::vector<Head> heap_;
  };

 private:
  using Bucket = std::tuple<std::string, int, double>;  // (pool, queue index, GPUs asked: n × p)
  static Bucket bucketOf(const Lease& l);
  Entries all_;
  std::map<Bucket, Entries> buckets_;
  std::map<std::string, int> in_pool_;
};

}  // namespace gpool::allocator
