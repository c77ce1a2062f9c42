#include "memory_audit.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>
#include <type_traits>
#include <unordered_map>

#include "leftover_processes.h"  // (parentOf)

namespace gpool::server {

// --- NVML, as the driver's library answers (only what the audit reads of it) ------------------------------
namespace {
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlProcessInfo_v2_t {  // what nvmlDeviceGetComputeRunningProcesses_v3 fills
  unsigned int pid;
  unsigned long long usedGpuMemory;  // ULLONG_MAX: not available
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr int kNvmlSuccess = 0, kNvmlInsufficientSize = 7;
}  // namespace

struct NvmlProcessMemory::Api {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  int (*processes)(nvmlDevice_t, unsigned*, nvmlProcessInfo_v2_t*) = nullptr;
  const char* (*error)(int) = nullptr;
  std::string said(int rc) const { return error ? error(rc) : "NVML error " + std::to_string(rc); }
};

std::unique_ptr<NvmlProcessMemory> NvmlProcessMemory::open(std::string& why) {
  auto api = std::make_unique<Api>();
  api->lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    why = std::string("cannot load libnvidia-ml.so.1: ") + ::dlerror();
    return nullptr;
  }
  auto find = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(api->lib, name));
    return fn != nullptr;
  };
  find(api->error, "nvmlErrorString");
  if (!find(api->init, "nvmlInit_v2") || !find(api->shutdown, "nvmlShutdown") || !find(api->count, "nvmlDeviceGetCount_v2") ||
      !find(api->handle, "nvmlDeviceGetHandleByIndex_v2") || !find(api->processes, "nvmlDeviceGetComputeRunningProcesses_v3")) {
    why = "libnvidia-ml.so.1 lacks nvmlDeviceGetComputeRunningProcesses_v3 (a driver older than 470?)";
    ::dlclose(api->lib);
    return nullptr;
  }
  if (int rc = api->init(); rc != kNvmlSuccess) {
    why = "nvmlInit: " + api->said(rc);
    ::dlclose(api->lib);
    return nullptr;
  }
  return std::unique_ptr<NvmlProcessMemory>(new NvmlProcessMemory(std::move(api)));
}

NvmlProcessMemory::NvmlProcessMemory(std::unique_ptr<Api> api) : api_(std::move(api)) {}

NvmlProcessMemory::~NvmlProcessMemory() {
  api_->shutdown();
  ::dlclose(api_->lib);
}

std::optional<ProcessMemory> NvmlProcessMemory::read(std::string& why) {
  unsigned devices = 0;
  if (int rc = api_->count(&devices); rc != kNvmlSuccess) {
    why = "nvmlDeviceGetCount: " + api_->said(rc);
    return std::nullopt;
  }
  ProcessMemory held;
  for (unsigned d = 0; d < devices; ++d) {
    nvmlDevice_t device = nullptr;
    if (int rc = api_->handle(d, &device); rc != kNvmlSuccess) {
      why = "nvmlDeviceGetHandleByIndex(" + std::to_string(d) + "): " + api_->said(rc);
      return std::nullopt;
    }
    std::vector<nvmlProcessInfo_v2_t> infos(64);
    unsigned n = static_cast<unsigned>(infos.size());
    int rc = api_->processes(device, &n, infos.data());
    for (int tries = 0; rc == kNvmlInsufficientSize && tries < 3; ++tries) {  // (more started meanwhile)
      infos.resize(n + 64);
      n = static_cast<unsigned>(infos.size());
      rc = api_->processes(device, &n, infos.data());
    }
    if (rc != kNvmlSuccess) {
      why = "nvmlDeviceGetComputeRunningProcesses(" + std::to_string(d) + "): " + api_->said(rc);
      return std::nullopt;
    }
    for (unsigned i = 0; i < n && i < infos.size(); ++i)
      if (infos[i].usedGpuMemory != ULLONG_MAX) held[static_cast<pid_t>(infos[i].pid)] += infos[i].usedGpuMemory;
  }
  return held;
}

// --- Whose memory it is ------------------------------------------------------------------------------------
namespace {

std::optional<uid_t> uidOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("Uid:", 0) == 0) return static_cast<uid_t>(std::stoul(line.substr(4)));
  return std::nullopt;
}

struct Owners {
  std::unordered_map<pid_t, size_t> by_worker;
  std::unordered_map<uid_t, size_t> by_uid;
  explicit Owners(const std::vector<MemoryAudit::Lease>& leases) {
    for (size_t i = 0; i < leases.size(); ++i) {
      for (pid_t w : leases[i].workers) by_worker[w] = i;
      if (leases[i].uid) by_uid[*leases[i].uid] = i;
    }
  }
  std::optional<size_t> of(pid_t process) const {
    pid_t p = process;
    for (int depth = 0; p > 1 && depth < 64; ++depth, p = parentOf(p))
      if (auto it = by_worker.find(p); it != by_worker.end()) return it->second;
    if (by_uid.empty()) return std::nullopt;
    auto uid = uidOf(process);
    if (auto it = uid ? by_uid.find(*uid) : by_uid.end(); it != by_uid.end()) return it->second;
    return std::nullopt;
  }
};

}  // namespace

std::optional<size_t> MemoryAudit::ownerOf(pid_t process, const std::vector<Lease>& leases) {
  return Owners(leases).of(process);
}

std::vector<MemoryAudit::Overrun> MemoryAudit::audit(const ProcessMemory& held, const std::vector<Lease>& leases) {
  Owners owners(leases);
  std::map<size_t, Overrun> found;
  for (const auto& [pid, bytes] : held) {
    if (bytes == 0) continue;
    if (auto i = owners.of(pid)) {
      Overrun& o = found[*i];
      o.used += bytes;
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
