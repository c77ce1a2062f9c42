// Queues with guaranteed shares (fair_share.h).
#include "fair_share.h"

#include <algorithm>

namespace gpool::allocator {

namespace {
constexpr double kEps = 1e-9;
}

void FairShare::reset(const std::vector<Queue>& queues) {
  queues_ = queues;
  nodes_.clear();
  none_gpus_ = 0;
  none_memory_ = 0;
  for (const auto& q : queues_) {
    int parent = -1;
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].queue->name == q.parent) parent = static_cast<int>(i);
    nodes_.push_back(Node{&q, parent});  // parents come first (parsePolicy orders them)
  }
}

int FairShare::queueOf(const Policy& p, const std::string& user, const std::vector<std::string>& groups) const {
  const Queue* q = p.queueOf(user, groups);
  for (size_t i = 0; q && i < nodes_.size(); ++i)
    if (nodes_[i].queue->name == q->name) return static_cast<int>(i);
  return -1;
}

void FairShare::charge(int q, double gpus, uint64_t memory, int sign) {
  if (q < 0) {
    none_gpus_ = std::max(0.0, none_gpus_ + sign * gpus);
    none_memory_ = sign > 0 ? none_memory_ + memory : none_memory_ - std::min(none_memory_, memory);
  }
  for (; q >= 0; q = nodes_[static_cast<size_t>(q)].parent) {
    Node& n = nodes_[static_cast<size_t>(q)];
    n.gpus = std::max(0.0, n.gpus + sign * gpus);
    n.memory = sign > 0 ? n.memory + memory : n.memory - std::min(n.memory, memory);
  }
}

std::optional<std::string> FairShare::limitBlocks(int q, double gpus, uint64_t memory) const {
  for (; q >= 0; q = nodes_[static_cast<size_t>(q)].parent) {
    const Node& n = nodes_[static_cast<size_t>(q)];
    const Quota& limit = n.queue->limit;
    if (limit.gpus && n.gpus + gpus > *limit.gpus + kEps)
      return "quota: queue '" + n.queue->name + "' holds " + formatNumber(n.gpus) + " of its limit of " +
             formatNumber(*limit.gpus) + " GPUs";
    if (limit.memory && n.memory + memory > *limit.memory)
      return "quota: queue '" + n.queue->name + "' holds " + formatSize(n.memory) + " of its limit of " +
             formatSize(*limit.memory) + " of GPU memory";
  }
  return std::nullopt;
}

double FairShare::beyondGuarantee(int q, double gpus) const {
  if (q < 0) return std::max(kEps, none_gpus_ + gpus);  // in no queue: together like one of weight 1, no guarantee
  bool within = true;
  for (int a = q; a >= 0 && within; a = nodes_[static_cast<size_t>(a)].parent) {
    const Node& n = nodes_[static_cast<size_t>(a)];
    within = n.gpus + gpus <= n.queue->guarantee.gpus.value_or(0) + kEps;
  }
  if (within) return 0;
  const Node& n = nodes_[static_cast<size_t>(q)];
  return std::max(kEps, (n.gpus + gpus - n.queue->guarantee.gpus.value_or(0)) / n.queue->weight);
}

double FairShare::borrowed(int q) const {
  if (q < 0) return none_gpus_;
  const Node& n = nodes_[static_cast<size_t>(q)];
  return std::max(0.0, n.gpus - n.queue->guarantee.gpus.value_or(0));
}

std::vector<FairShare::View> FairShare::view() const {
  std::vector<View> out;
  for (const auto& n : nodes_) out.push_back(View{n.queue, n.gpus, n.memory});
  return out;
}

}  // namespace gpool::allocator
