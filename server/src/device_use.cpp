#include "device_use.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>

#include "shared_budget.h"

namespace gpool::server {

int64_t ReadClock::elapsedNs() {
  auto now = std::chrono::steady_clock::now();
  auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
  last_ = now;
  return elapsed;
}

bool inHostPidNamespace() {
  constexpr ino_t kInitialPidNamespace = 0xEFFFFFFCu;  // (the kernel's PROC_PID_INIT_INO)
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) != 0 || st.st_ino == kInitialPidNamespace;  // (unreadable: assume so)
}

DeviceUse SimDeviceUse::read(const std::vector<Worker>& workers) {
  DeviceUse use;
  use.elapsed_ns = clock_.elapsedNs();
  use.busy.emplace();
  std::map<DeviceProcess, uint64_t> counts;
  for (const Worker& w : workers) {
    if (w.slot < 0) continue;
    DeviceProcess where{w.device, w.pid};
    use.memory[w.pid] = memory_->heldBy(w.slot);
    uint64_t count = counts[where] = busy_->heldBy(w.slot);
    auto last = last_busy_.find(where);
    uint64_t before = last == last_busy_.end() || last->second > count ? 0 : last->second;  // (a worker first seen: from 0)
    if (count > before) (*use.busy)[where] = static_cast<int64_t>(std::min<uint64_t>(count - before, INT64_MAX));
  }
  last_busy_ = std::move(counts);
  return use;
}

// --- NVML, as the driver's library answers (only what the audits read of it) -----------------------------
namespace {
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlProcessInfo_v2_t {  // what nvmlDeviceGetComputeRunningProcesses_v3 fills
  unsigned int pid;
  unsigned long long usedGpuMemory;  // ULLONG_MAX: not available
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
struct nvmlProcessUtilizationSample_t {  // what nvmlDeviceGetProcessUtilization fills
  unsigned int pid;
  unsigned long long timeStamp;  // µs
  unsigned int smUtil, memUtil, encUtil, decUtil;  // percent
};
constexpr int kNvmlSuccess = 0, kNvmlNotFound = 6, kNvmlInsufficientSize = 7;

// NVML's answer to `ask(&n, entries)` with room for 64 entries, and more while it says it needs more
// (processes started meanwhile), up to three times; `n`: the entries it filled.
template <class Entry, class Ask>
int askWithRoom(std::vector<Entry>& entries, unsigned& n, Ask ask) {
  entries.resize(64);
  n = static_cast<unsigned>(entries.size());
  int rc = ask(&n, entries.data());
  for (int tries = 0; rc == kNvmlInsufficientSize && tries < 3; ++tries) {
    entries.resize(std::max<size_t>(n, entries.size()) + 64);
    n = static_cast<unsigned>(entries.size());
    rc = ask(&n, entries.data());
  }
  return rc;
}
}  // namespace

struct NvmlDeviceUse::Api {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  int (*processes)(nvmlDevice_t, unsigned*, nvmlProcessInfo_v2_t*) = nullptr;
  int (*utilization)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned*, unsigned long long) = nullptr;
  int (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  const char* (*error)(int) = nullptr;
  std::string said(int rc) const { return error ? error(rc) : "NVML error " + std::to_string(rc); }
};

std::optional<std::vector<int>> serverNumbers(const std::vector<std::string>& nvml, const std::vector<std::string>& served,
                                              std::string& why) {
  std::vector<int> numbers(nvml.size());
  for (size_t d = 0; d < nvml.size(); ++d) {
    auto at = std::find(served.begin(), served.end(), nvml[d]);
    numbers[d] = served.empty() ? static_cast<int>(d) : at != served.end() ? static_cast<int>(at - served.begin()) : -1 - static_cast<int>(d);
  }
  for (size_t g = 0; g < served.size(); ++g)
    if (std::find(nvml.begin(), nvml.end(), served[g]) == nvml.end()) {
      why = "this server's device " + std::to_string(g) + " (" + served[g] + ") is not among NVML's devices" +
            (served[g].rfind("MIG-", 0) == 0 ? " (a MIG instance: NVML does not count each instance's processes' time)" : "");
      return std::nullopt;
    }
  return numbers;
}

std::unique_ptr<NvmlDeviceUse> NvmlDeviceUse::open(const std::vector<std::string>& served, std::string& why) {
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
  find(api->utilization, "nvmlDeviceGetProcessUtilization");  // (without it, device time is not known)
  find(api->uuid, "nvmlDeviceGetUUID");                         // (nor without this: which device is which)
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
  std::unique_ptr<NvmlDeviceUse> use(new NvmlDeviceUse(std::move(api)));
  use->number(served);
  return use;
}

// Which of NVML's devices is which of the server's, by UUID (serverNumbers), once: GPUs do not come and go
// while the driver is loaded.
void NvmlDeviceUse::number(const std::vector<std::string>& served) {
  unsigned devices = 0;
  if (!api_->uuid) {
    numbers_why_ = "libnvidia-ml.so.1 lacks nvmlDeviceGetUUID";
    return;
  }
  if (int rc = api_->count(&devices); rc != kNvmlSuccess) {
    numbers_why_ = "nvmlDeviceGetCount: " + api_->said(rc);
    return;
  }
  std::vector<std::string> uuids;
  for (unsigned d = 0; d < devices; ++d) {
    nvmlDevice_t device = nullptr;
    char uuid[96] = {};  // (NVML_DEVICE_UUID_V2_BUFFER_SIZE)
    int rc = api_->handle(d, &device);
    if (rc == kNvmlSuccess) rc = api_->uuid(device, uuid, sizeof uuid);
    if (rc != kNvmlSuccess) {
      numbers_why_ = "the UUID of NVML's device " + std::to_string(d) + ": " + api_->said(rc);
      return;
    }
    uuids.emplace_back(uuid, ::strnlen(uuid, sizeof uuid));
  }
  numbers_ = serverNumbers(uuids, served, numbers_why_);
}

NvmlDeviceUse::NvmlDeviceUse(std::unique_ptr<Api> api) : api_(std::move(api)) {}

NvmlDeviceUse::~NvmlDeviceUse() {
  api_->shutdown();
  ::dlclose(api_->lib);
}

std::optional<DeviceUse> NvmlDeviceUse::read(std::string& why) {
  unsigned devices = 0;
  if (int rc = api_->count(&devices); rc != kNvmlSuccess) {
    why = "nvmlDeviceGetCount: " + api_->said(rc);
    return std::nullopt;
  }
  DeviceUse use;
  use.elapsed_ns = clock_.elapsedNs();
  last_seen_.resize(devices, 0);
  if (!api_->utilization) use.busy_why = "libnvidia-ml.so.1 lacks nvmlDeviceGetProcessUtilization";
  else if (!numbers_) use.busy_why = "cannot tell which of NVML's devices is which of this server's: " + numbers_why_;
  else use.busy.emplace();
  for (unsigned d = 0; d < devices; ++d) {
    nvmlDevice_t device = nullptr;
    if (int rc = api_->handle(d, &device); rc != kNvmlSuccess) {
      why = "nvmlDeviceGetHandleByIndex(" + std::to_string(d) + "): " + api_->said(rc);
      return std::nullopt;
    }
    std::vector<nvmlProcessInfo_v2_t> infos;
    unsigned n = 0;
    int rc = askWithRoom(infos, n, [&](unsigned* room, nvmlProcessInfo_v2_t* into) { return api_->processes(device, room, into); });
    if (rc != kNvmlSuccess) {
      why = "nvmlDeviceGetComputeRunningProcesses(" + std::to_string(d) + "): " + api_->said(rc);
      return std::nullopt;
    }
    for (unsigned i = 0; i < n && i < infos.size(); ++i)
      if (infos[i].usedGpuMemory != ULLONG_MAX) use.memory[static_cast<pid_t>(infos[i].pid)] += infos[i].usedGpuMemory;
    if (use.busy && !readBusy(d, device, use.elapsed_ns, use)) use.busy.reset();
  }
  return use;
}

// Each process's samples newer than the last read: their mean share of the SMs' time, times the time since
// the last read. False (and use.busy_why) when NVML cannot say.
bool NvmlDeviceUse::readBusy(unsigned d, void* handle, int64_t elapsed_ns, DeviceUse& use) {
  auto device = static_cast<nvmlDevice_t>(handle);
  std::vector<nvmlProcessUtilizationSample_t> samples;
  unsigned n = 0;
  int rc = askWithRoom(samples, n, [&](unsigned* room, nvmlProcessUtilizationSample_t* into) {
    return api_->utilization(device, into, room, last_seen_[d]);
  });
  if (rc == kNvmlNotFound) return true;  // (no sample since the last read: no process was busy)
  if (rc != kNvmlSuccess) {
    use.busy_why = "nvmlDeviceGetProcessUtilization(" + std::to_string(d) + "): " + api_->said(rc);
    return false;
  }
  std::map<pid_t, std::pair<uint64_t, unsigned>> sums;  // percent summed, samples
  const unsigned long long since = last_seen_[d];
  for (unsigned i = 0; i < n && i < samples.size(); ++i) {
    const auto& s = samples[i];
    if (s.timeStamp <= since) continue;
    auto& [percent, count] = sums[static_cast<pid_t>(s.pid)];
    percent += std::min(s.smUtil, 100u), ++count;  // (drivers have been seen to say more than 100)
    last_seen_[d] = std::max(last_seen_[d], s.timeStamp);
  }
  int number = d < numbers_->size() ? (*numbers_)[d] : -1 - static_cast<int>(d);  // (a device NVML shows anew: not served)
  for (const auto& [pid, sum] : sums)
    if (sum.first > 0)
      (*use.busy)[{number, pid}] = static_cast<int64_t>(static_cast<double>(elapsed_ns) * sum.first / sum.second / 100);
  return true;
}

}  // namespace gpool::server
