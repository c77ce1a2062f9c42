// Where a lease's device memory is checked from outside its workers. Each worker enforces its lease's
// memory cap on every allocation (memory_ledger.h), and counts what it holds in pages it can write: a
// worker taken over by its client could go around the ledger, call the driver itself, or lower its count.
// So gpool-server also reads what the driver counts each process holding (device_use.h: NVML on a GPU; on
// sim, the emulated device's count, which stands for the driver's), and ends a lease's processes when they
// hold more than its cap and what each worker's context takes (--context-memory), at two audits running
// (use_audits.h ends them).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "device_use.h"  // (ProcessMemory)

namespace gpool::server {

class MemoryAudit {
 public:
  struct Lease {
    std::string id;
    uint64_t cap = 0;                 // its shares' memory caps here, in all
    std::vector<pid_t> workers;       // its workers here
    std::optional<uid_t> uid;         // --worker-uids: the user its workers run as
  };
  struct Overrun {
    std::string lease;
    uint64_t used = 0, allowed = 0;
    std::vector<pid_t> processes;  // those holding its memory
  };

  // `per_worker`: device memory each worker may hold past its lease's cap (its context, module code).
  explicit MemoryAudit(uint64_t per_worker) : per_worker_(per_worker) {}

  // Each lease's part of what the processes hold (`held`): its workers', their descendants' (by /proc's
  // parent links), and with a uid of its own, every process of that uid's. Returns the leases past their
  // cap and their workers' allowance at this audit and at the one before it.
  std::vector<Overrun> audit(const ProcessMemory& held, const std::vector<Lease>& leases);

  // The lease `process` belongs to, if any: a worker's, a worker's descendant's, or its uid's (tests).
  static std::optional<size_t> ownerOf(pid_t process, const std::vector<Lease>& leases);

 private:
  uint64_t per_worker_;
  std::set<std::string> past_;  // leases past what they may hold at the last audit
};

}  // namespace gpool::server
