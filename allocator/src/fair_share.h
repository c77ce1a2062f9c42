// Queues with guaranteed shares (issue 14; the policy's [queues], policy.h): what each queue holds, whether
// its limit lets a request in, and in which order queued requests are granted. Requests within their
// queue's guarantee come first (by priority, then arrival); then the rest, the queue that holds least
// beyond its guarantee for its weight first, so idle capacity is divided among borrowing queues in
// proportion to their weights rather than by who came first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "policy.h"

namespace gpool::allocator {

class FairShare {
 public:
  FairShare() = default;
  FairShare(const FairShare&) = delete;  // its nodes point into its own copy of the queues
  FairShare& operator=(const FairShare&) = delete;

  // Forgets all use: the caller charges every granted lease again.
  void reset(const std::vector<Queue>& queues);
  bool active() const { return !queues_.empty(); }

  // The queue a requester charges (its index here), or -1 for none.
  int queueOf(const Policy& p, const std::string& user, const std::vector<std::string>& groups) const;
  // Adds (sign +1) or removes (-1) use of queue q and its ancestors.
  void charge(int q, double gpus, uint64_t memory, int sign);
  // Why a queue's limit (q's or an ancestor's) keeps `gpus` and `memory` more out, if it does.
  std::optional<std::string> limitBlocks(int q, double gpus, uint64_t memory) const;
  // Where a request for `gpus` from queue q stands in the grant order: 0 when it stays within the
  // guarantee of q and every ancestor; else how far beyond its queue's guarantee the queue would be, over
  // its weight (smaller: granted earlier).
  double beyondGuarantee(int q, double gpus) const;
  // What queue q holds beyond its guarantee (for q -1, requesters in no queue: all they hold).
  double borrowed(int q) const;

  // For status and metrics.
  struct View {
    const Queue* queue;
    double gpus;
    uint64_t memory;
  };
  std::vector<View> view() const;

 private:
  struct Node {
    const Queue* queue;
    int parent;  // index, -1 for a top-level queue
    double gpus = 0;
    uint64_t memory = 0;
  };
  std::vector<Node> nodes_;
  std::vector<Queue> queues_;  // the policy's, kept so nodes can point into them
  double none_gpus_ = 0;       // what requesters in no queue hold
  uint64_t none_memory_ = 0;
};

}  // namespace gpool::allocator
