#include "lease_gate.h"

#include <algorithm>

namespace gpool::server {

std::vector<LeaseGate::Waiting> LeaseGate::take(const std::function<bool(const Waiting&)>& pick) {
  std::vector<Waiting> out;
  std::erase_if(waiting_, [&](Waiting& w) {
    if (!pick(w)) return false;
    out.push_back(std::move(w));
    return true;
  });
  return out;  // settled after they left the list: a verdict may admit another client
}

uint64_t LeaseGate::admit(const std::string& lease, uint64_t asked, Verdict verdict) {
  if (live(lease)) {
    verdict(true, "");
    return 0;
  }
  waiting_.push_back(Waiting{lease, asked, next_ticket_, std::move(verdict)});
  return next_ticket_++;
}

std::vector<std::string> LeaseGate::update(const std::vector<std::string>& live, uint64_t asked) {
  std::set<std::string> now(live.begin(), live.end());
  std::vector<std::string> gone;
  std::set_difference(live_.begin(), live_.end(), now.begin(), now.end(), std::back_inserter(gone));
  live_ = std::move(now);
  // Decided: a live lease, or an answer given after the client arrived.
  for (auto& w : take([&](const Waiting& w) { return live_.count(w.lease) || w.asked <= asked; })) {
    bool ok = live_.count(w.lease) != 0;
    w.verdict(ok, ok ? "" : "lease " + w.lease + " has ended (the allocator does not list it as live on this server)");
  }
  return gone;
}

void LeaseGate::expire(uint64_t ticket) {
  for (auto& w : take([ticket](const Waiting& w) { return w.ticket == ticket; }))
    w.verdict(false, "the allocator did not confirm lease " + w.lease + " in time (is it reachable?)");
}

}  // namespace gpool::server
