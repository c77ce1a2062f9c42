// gpool-worker's command line: what gpool-server tells the worker it starts (its client's socket, the
// device, the backend, the lease's memory cap and compute share, the shared pages it counts in, the user it
// serves as, its caches and sandbox).
#pragma once

#include <CLI/CLI.hpp>

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "sim_backend.h"

namespace gpool::worker {

struct WorkerOptions {
  int fd = -1;  // the connected client socket
  int device = 0;
  uint64_t hello_seq = 0;
  std::string backend = "sim", log_level = "info";
  bool probe = false, inventory = false, peer_links = true, separate_host = false, sandbox = true;
  uint64_t memory_cap = 0;
  pid_t server_pid = 0;
  std::string module_cache_dir, jit_cache_dir;
  std::string cuda_driver;  // the cuda backend's driver library (empty: libcuda.so.1 as the loader finds it)
  uint64_t module_cache_max = 8ull << 30;
  int stall_timeout_ms = 60000;
  // gpool-server's shared pages, inherited as descriptors (-1: none)
  int budget_fd = -1, device_budget_fd = -1, device_busy_fd = -1, launch_counter_fd = -1, compute_pace_fd = -1;
  int budget_slot = 0;
  double compute_share = 1.0;
  int uid = -1, gid = -1;
  unsigned max_threads = 0;
  SimOptions sim;

  void declare(CLI::App& app);
};

}  // namespace gpool::worker
