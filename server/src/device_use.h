// What the driver counts each process on this host's GPUs using, read by gpool-server from outside its
// workers for its audits (memory_audit.h, compute_audit.h): the device memory each holds, and the device
// time each took on each GPU since the last read. On a GPU, through NVML (the driver's
// libnvidia-ml.so.1, loaded here); on sim, the server reads the emulated device's pages instead (listener.cpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpool::budget {
class SharedBudget;
}

namespace gpool::server {

// Whether this process is in the host's pid namespace, whose pids NVML names processes by: in a container's
// own, NVML's pids are not this server's, and the audits can tell none of its workers.
bool inHostPidNamespace();

using ProcessMemory = std::map<pid_t, uint64_t>;  // bytes of device memory each process holds, on every device
// A process on one device, numbered as gpool-server numbers its GPUs (its workers' --device); a GPU of the
// host it does not serve (CUDA_VISIBLE_DEVICES) is -1 less NVML's index of it.
using DeviceProcess = std::pair<int, pid_t>;
using ProcessBusy = std::map<DeviceProcess, int64_t>;  // ns of device time each took since the last read

// The time between a reader's reads (steady_clock: CLOCK_MONOTONIC).
class ReadClock {
 public:
  // Since the last call (the first: since made).
  int64_t elapsedNs();

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

struct DeviceUse {
  ProcessMemory memory;
  int64_t elapsed_ns = 0;           // since the last read
  std::optional<ProcessBusy> busy;  // nullopt: not known (busy_why says why)
  std::string busy_why;
};

// gpool-server's number for each of NVML's devices (by index), found by UUID: NVML numbers the host's GPUs
// in PCI order, CUDA (and so gpool-server) fastest first and only those CUDA_VISIBLE_DEVICES shows. A GPU
// the server does not serve is -1 less its NVML index. `served`: the server's GPUs' UUIDs, in its order
// (empty: a server that lists none, without an allocator, which serves no lease: NVML's order is taken).
// Nullopt, and `why`, when a GPU the server serves is not among NVML's (a MIG instance: NVML counts a
// physical GPU's time, not an instance's).
std::optional<std::vector<int>> serverNumbers(const std::vector<std::string>& nvml, const std::vector<std::string>& served,
                                              std::string& why);

// NVML's counts: nvmlDeviceGetComputeRunningProcesses_v3 (memory) and nvmlDeviceGetProcessUtilization
// (each process's share of the SMs' time over the driver's recent samples; times the time since the last
// read, an estimate of the device time it took).
class NvmlDeviceUse {
 public:
  // Null, and `why`, when NVML cannot be loaded or started. `served`: as serverNumbers takes it; when the
  // devices cannot be matched, device time is not read (DeviceUse::busy_why says why).
  static std::unique_ptr<NvmlDeviceUse> open(const std::vector<std::string>& served, std::string& why);
  ~NvmlDeviceUse();
  // Nullopt, and `why`, when the processes cannot be read now.
  std::optional<DeviceUse> read(std::string& why);

 private:
  struct Api;
  explicit NvmlDeviceUse(std::unique_ptr<Api> api);
  void number(const std::vector<std::string>& served);
  bool readBusy(unsigned device, void* handle, int64_t elapsed_ns, DeviceUse& use);
  std::unique_ptr<Api> api_;
  std::optional<std::vector<int>> numbers_;  // serverNumbers, by NVML index; nullopt: not matched (numbers_why_)
  std::string numbers_why_;
  std::vector<unsigned long long> last_seen_;  // per device: the newest utilization sample read (µs)
  ReadClock clock_;
};

// The sim backend's counts, which stand for the driver's: the emulated device's memory each worker holds
// (one page for the server's workers, a slot each) and the device time each worker's kernels took (another
// such page, in ns, counted as each kernel ends).
class SimDeviceUse {
 public:
  struct Worker {
    pid_t pid = 0;
    int slot = 0;    // its slot in both pages
    int device = 0;  // the device it serves (its kernels' time is counted there)
  };
  SimDeviceUse(std::shared_ptr<budget::SharedBudget> memory, std::shared_ptr<budget::SharedBudget> busy)
      : memory_(std::move(memory)), busy_(std::move(busy)) {}
  DeviceUse read(const std::vector<Worker>& workers);

 private:
  std::shared_ptr<budget::SharedBudget> memory_, busy_;
  std::map<DeviceProcess, uint64_t> last_busy_;  // each worker's count at the last read
  ReadClock clock_;
};

}  // namespace gpool::server
