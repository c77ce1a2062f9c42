#include "use_audits.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>

namespace gpool::server {

namespace {

// The leases with workers here, as an audit takes them: each one's id, workers and (with --worker-uids) uid,
// and what `add` takes of each worker. With `clients`, a client without a lease (a server without
// --allocator) is taken as a lease of its own, its id saying so.
template <class Lease, class Add>
std::vector<Lease> leasesServed(const UseAudits::Served& served, bool clients, Add add) {
  std::map<std::string, Lease> by_id;
  for (const UseAudits::Worker& w : served.workers) {
    if (w.lease.empty() && !clients) continue;
    std::string id = w.lease.empty() ? "the client of worker " + std::to_string(w.pid) + " (no lease)" : w.lease;
    Lease& l = by_id[id];
    l.id = id;
    l.workers.push_back(w.pid);
    if (served.by_uid && !w.lease.empty()) l.uid = w.uid;  // (clients without a lease share their uid)
    add(l, w);
  }
  std::vector<Lease> leases;
  for (auto& [id, l] : by_id) leases.push_back(std::move(l));
  return leases;
}

// A lease in the audits' logs: "lease L…", or what leasesServed calls a client without one.
std::string leaseNamed(const std::string& id, const UseAudits::Served& served) {
  bool lease = std::any_of(served.workers.begin(), served.workers.end(), [&](const UseAudits::Worker& w) { return w.lease == id; });
  return lease ? "lease " + id : id;
}

// A device in the audits' logs: gpool-server's number for it, or NVML's for a GPU of the host it does not serve.
std::string deviceNamed(int device) {
  return device >= 0 ? "device " + std::to_string(device) : "NVML's device " + std::to_string(-1 - device) + " (not this server's)";
}

}  // namespace

std::unique_ptr<UseAudits> UseAudits::start(asio::io_context& io, const Settings& settings, Sim sim,
                                            std::function<Served()> served, std::function<void()> before_each) {
  if (!settings.memory && settings.compute_limit_ns <= 0) return nullptr;
  std::unique_ptr<UseAudits> audits(new UseAudits(io, settings));
  if (sim.memory && sim.busy) {
    audits->sim_.emplace(std::move(sim.memory), std::move(sim.busy));
  } else {
    std::string why;
    audits->nvml_ = NvmlDeviceUse::open(settings.gpus, why);
    if (!audits->nvml_) {
      spdlog::warn("leases' device memory and time are not checked from outside their workers (--memory-audit, "
                   "--compute-audit): {}; each worker's own checks of its lease's cap and share stand alone", why);
      return nullptr;
    }
    if (!inHostPidNamespace())
      spdlog::warn("gpool-server runs in a pid namespace of its own (a container): NVML names processes by the host's "
                   "pids, so --memory-audit and --compute-audit can tell none of this server's workers and end nothing; "
                   "run it in the host's pid namespace (docker run --pid=host; Kubernetes: hostPID: true)");
  }
  audits->served_ = std::move(served);
  audits->before_each_ = std::move(before_each);
  audits->later();
  return audits;
}

UseAudits::UseAudits(asio::io_context& io, const Settings& settings) : timer_(io), settings_(settings) {
  if (settings.memory) memory_.emplace(settings.per_worker);
  if (settings.compute_limit_ns > 0) compute_.emplace(settings.compute_limit_ns);
}

std::map<std::string, int64_t> UseAudits::computeAhead() const {
  return compute_ ? compute_->ahead() : std::map<std::string, int64_t>{};
}

void UseAudits::later() {
  timer_.expires_after(std::chrono::milliseconds(settings_.interval_ms));
  timer_.async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    tick();
    later();
  });
}

void UseAudits::tick() {
  before_each_();
  Served served = served_();
  std::string why;
  std::optional<DeviceUse> use;
  if (sim_) {
    std::vector<SimDeviceUse::Worker> placed;
    for (const Worker& w : served.workers) placed.push_back({w.pid, w.slot, w.share.device});
    use = sim_->read(placed);
  } else {
    use = nvml_->read(why);
  }
  if (!use) {
    if (!unread_) spdlog::warn("cannot read what each process uses of the GPU: {} (the audits try again)", why);
    unread_ = true;
    return;
  }
  unread_ = false;
  if (memory_) checkMemory(*use, served);
  if (compute_) checkCompute(*use, served);
}

void UseAudits::checkMemory(const DeviceUse& use, const Served& served) {
  auto leases = leasesServed<MemoryAudit::Lease>(served, false, [&](MemoryAudit::Lease& l, const Worker& w) {
    if (auto cap = served.caps.find(w.lease); cap != served.caps.end()) l.cap = cap->second;
  });
  for (const auto& o : memory_->audit(use.memory, leases)) {
    ++memory_overruns_;
    std::string pids;
    for (pid_t pid : o.processes) pids += (pids.empty() ? "" : ", ") + std::to_string(pid);
    spdlog::error("lease {}: its processes hold {} MiB of device memory as the driver counts it, past the {} MiB of its cap "
                  "and its workers' contexts (--context-memory): a worker went around its lease's cap; ending {}",
                  o.lease, o.used >> 20, o.allowed >> 20, pids);
    end(o.processes, served, WorkerStop::kMemoryAudit);
  }
}

void UseAudits::checkCompute(const DeviceUse& use, const Served& served) {
  if (!use.busy) {
    if (!busy_unread_)
      spdlog::warn("leases' device time is not checked from outside their workers (--compute-audit): {}; each worker's "
                   "own pacing of its lease's share stands alone", use.busy_why);
    busy_unread_ = true;
    return;
  }
  busy_unread_ = false;
  auto leases = leasesServed<ComputeAudit::Lease>(served, true, [](ComputeAudit::Lease& l, const Worker& w) { l.shares.push_back(w.share); });
  double limit_s = static_cast<double>(settings_.compute_limit_ns) / 1e9;
  for (const auto& f : compute_->audit(*use.busy, use.elapsed_ns, leases)) {
    double ahead_s = static_cast<double>(f.ahead_ns) / 1e9;
    if (!f.over) {
      spdlog::warn("{}: its processes took {:.1f} s of {}'s time past its share of {:.2f}, as the driver "
                   "counts it; past {:g} s (--compute-audit) they are ended", leaseNamed(f.lease, served), ahead_s, deviceNamed(f.device), f.fraction, limit_s);
      continue;
    }
    ++compute_overruns_;
    std::string pids;
    for (pid_t pid : f.processes) pids += (pids.empty() ? "" : ", ") + std::to_string(pid);
    spdlog::error("{}: its processes took {:.1f} s of {}'s time past its share of {:.2f}, as the driver counts "
                  "it, more than the {:g} s --compute-audit allows (a kernel that long, or a worker that went around its "
                  "share{}); ending {}", leaseNamed(f.lease, served), ahead_s, deviceNamed(f.device), f.fraction, limit_s,
                  f.fraction > 0 ? "" : ", or onto a GPU the lease has no share of", pids);
    end(f.processes, served, WorkerStop::kComputeAudit);
  }
}

void UseAudits::end(const std::vector<pid_t>& processes, const Served& served, WorkerStop why) {
  std::set<pid_t> workers;
  for (const Worker& w : served.workers) workers.insert(w.pid);
  auto told = std::make_shared<std::vector<int>>();  // pidfds of the workers told why
  for (pid_t pid : processes) {
    int fd = workers.count(pid) ? static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)) : -1;
    if (fd < 0 || ::sigqueue(pid, SIGTERM, sigval{.sival_int = static_cast<int>(why)}) != 0) {
      ::kill(pid, SIGKILL);  // (no worker, or no pidfd on this kernel: at once)
      if (fd >= 0) ::close(fd);
      continue;
    }
    told->push_back(fd);
  }
  if (told->empty()) return;
  auto timer = std::make_shared<asio::steady_timer>(timer_.get_executor(), std::chrono::milliseconds(kGraceMs));
  timer->async_wait([timer, told](const asio::error_code&) {
    for (int fd : *told) {
      ::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);  // (ended already: nothing; its pid is not reused while fd is open)
      ::close(fd);
    }
  });
}

}  // namespace gpool::server
