// Why gpool-server stops a worker: the value it queues with the worker's SIGTERM (sigqueue), which the
// worker reads (server/worker/revocation.cpp) and tells its client in its last frame, so that the program's
// error says why. A plain SIGTERM from gpool-server (kill) means the lease ended at the allocator.
#pragma once

namespace gpool {

enum class WorkerStop : int {
  kLeaseEnded = 0,    // released, expired, preempted or past its time limit at the allocator
  kMemoryAudit = 1,   // its lease's processes held more device memory than its cap (server/src/memory_audit.h)
  kComputeAudit = 2,  // they took more device time past its share than --compute-audit (server/src/compute_audit.h)
};

// What the worker tells its client; nullptr for a value that names no reason.
constexpr const char* workerStopReason(int value) {
  switch (static_cast<WorkerStop>(value)) {
    case WorkerStop::kLeaseEnded:
      return "its lease ended at the allocator (released, expired, preempted or past its time limit)";
    case WorkerStop::kMemoryAudit:
      return "gpool-server ended it: its lease's processes held more device memory than the lease's cap, as the "
             "driver counts it (--memory-audit)";
    case WorkerStop::kComputeAudit:
      return "gpool-server ended it: its lease's processes (a client without a lease: its own) kept the GPU busy "
             "further past their share of its time than --compute-audit allows (one kernel too long for the share?)";
  }
  return nullptr;
}

}  // namespace gpool
