// Memory an ended worker exported, charged while others hold it (held_exports.h).
#include "held_exports.h"

#include <algorithm>

namespace gpool::server {

uint64_t HeldExports::adopt(const Ended& ended) {
  std::vector<budget::HeldRecord> records = budget::withdrawAllOf(ended.worker, ended.uid, ended.seal);
  if (records.empty()) return 0;
  uint64_t bytes = 0;
  for (const auto& r : records) bytes += r.charge;
  held_.push_back(Held{ended, std::move(records)});
  return bytes;
}

std::vector<HeldExports::Ended> HeldExports::settle(const std::function<void(const Ended&, uint64_t)>& released) {
  std::vector<Ended> done;
  std::erase_if(held_, [&](Held& h) {
    std::erase_if(h.records, [&](const budget::HeldRecord& r) {
      if (!r.file.unheld()) return false;
      released(h.ended, r.charge);
      return true;  // (the record's file is removed as it closes)
    });
    if (!h.records.empty()) return false;
    done.push_back(h.ended);
    return true;
  });
  return done;
}

bool HeldExports::holdsSlot(int slot) const {
  return std::any_of(held_.begin(), held_.end(), [&](const Held& h) { return h.ended.slot == slot; });
}

bool HeldExports::holdsFor(const std::string& lease) const {
  return std::any_of(held_.begin(), held_.end(), [&](const Held& h) { return !lease.empty() && h.ended.lease == lease; });
}

std::vector<std::string> HeldExports::leases() const {
  std::vector<std::string> out;
  for (const Held& h : held_)
    if (!h.ended.lease.empty() && std::find(out.begin(), out.end(), h.ended.lease) == out.end()) out.push_back(h.ended.lease);
  return out;
}

}  // namespace gpool::server
