// gpool-server's audits of what its leases use of the GPU, from outside their workers: at each tick
// (--memory-audit seconds apart) it reads what the driver counts each process using (device_use.h: NVML on a
// GPU, the emulated device's pages on sim), checks each lease's device memory against its cap
// (memory_audit.h) and its device time against its share (compute_audit.h), and ends the processes of a
// lease past either, saying why in the log (and to the lease's program, through its workers) and counting
// it for /metrics.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
// (after a standard header: asio's configuration reads libstdc++'s, and every file of a program must read it
// alike; before one, its handlers' memory came from operator new here and was freed by free() elsewhere)
#include <asio.hpp>

#include "compute_audit.h"
#include "device_use.h"
#include "gpool/worker_stop.h"
#include "memory_audit.h"

namespace gpool::server {

class UseAudits {
 public:
  struct Worker {
    pid_t pid = 0;
    std::string lease;  // "": a client without one (not audited)
    int slot = -1;      // its slot in the sim's pages
    uid_t uid = 0;
    ComputeAudit::Share share;  // and the device it serves
  };
  struct Served {  // what the server serves now, read at each tick
    std::vector<Worker> workers;
    std::map<std::string, uint64_t> caps;  // each lease's shares' memory caps here, summed; 0: one share has none
    bool by_uid = false;                   // --worker-uids: every process of a lease's uid is the lease's
  };
  struct Settings {
    unsigned interval_ms = 1000;
    bool memory = true;             // --memory-audit not 0
    uint64_t per_worker = 0;        // --context-memory
    int64_t compute_limit_ns = 0;   // --compute-audit; 0: not audited
    std::vector<std::string> gpus;  // on a GPU: the UUIDs of the server's GPUs, in its order (NVML's are matched to them)
  };
  struct Sim {  // the sim backend's pages (none on a GPU)
    std::shared_ptr<budget::SharedBudget> memory, busy;
  };

  // Null when neither audit is on, or (on a GPU) when NVML cannot be opened, which it says in the log.
  static std::unique_ptr<UseAudits> start(asio::io_context& io, const Settings& settings, Sim sim,
                                          std::function<Served()> served, std::function<void()> before_each);

  uint64_t memoryOverruns() const { return memory_overruns_; }
  uint64_t computeOverruns() const { return compute_overruns_; }
  // How far ahead of its share each lease below a whole GPU is, as the driver counts (ns).
  std::map<std::string, int64_t> computeAhead() const;

 private:
  UseAudits(asio::io_context& io, const Settings& settings);
  void later();
  void tick();
  void checkMemory(const DeviceUse& use, const Served& served);
  void checkCompute(const DeviceUse& use, const Served& served);
  // Ends a lease's processes: its workers with a SIGTERM that says `why` (which their clients are told) and
  // SIGKILL kGraceMs later, through a pidfd (a pid used again meanwhile is safe); the others at once.
  void end(const std::vector<pid_t>& processes, const Served& served, WorkerStop why);
  static constexpr int kGraceMs = 2000;

  asio::steady_timer timer_;
  Settings settings_;
  std::unique_ptr<NvmlDeviceUse> nvml_;
  std::optional<SimDeviceUse> sim_;
  std::optional<MemoryAudit> memory_;
  std::optional<ComputeAudit> compute_;
  std::function<Served()> served_;
  std::function<void()> before_each_;
  bool unread_ = false, busy_unread_ = false;
  uint64_t memory_overruns_ = 0, compute_overruns_ = 0;
};

}  // namespace gpool::server
