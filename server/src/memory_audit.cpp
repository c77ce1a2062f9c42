#include "memory_audit.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include "lease_processes.h"

namespace gpool::server {

std::optional<size_t> MemoryAudit::ownerOf(pid_t process, const std::vector<Lease>& leases) {
  return ProcessOwners(leases).of(process);
}

std::vector<MemoryAudit::Overrun> MemoryAudit::audit(const ProcessMemory& held, const std::vector<Lease>& leases) {
  ProcessOwners owners(leases);
  std::map<size_t, Overrun> found;
  for (const auto& [pid, bytes] : held) {
    if (bytes == 0) continue;
    if (auto i = owners.of(pid)) {
      Overrun& o = found[*i];
      o.used = o.used > UINT64_MAX - bytes ? UINT64_MAX : o.used + bytes;  // (no wrapping round below the cap)
      o.processes.push_back(pid);
    }
  }
  std::set<std::string> past;
  std::vector<Overrun> overruns;
  for (auto& [i, o] : found) {
    const Lease& lease = leases[i];
    if (lease.cap == 0) continue;  // (no cap: the whole GPU)
    o.lease = lease.id;
    o.allowed = lease.cap + per_worker_ * lease.workers.size();
    if (o.used <= o.allowed) continue;
    past.insert(lease.id);
    if (!past_.count(lease.id)) continue;  // (a moment past it, a module loading, is let be)
    for (pid_t w : lease.workers)
      if (std::find(o.processes.begin(), o.processes.end(), w) == o.processes.end()) o.processes.push_back(w);
    overruns.push_back(std::move(o));
  }
  past_ = std::move(past);
  return overruns;
}

}  // namespace gpool::server
