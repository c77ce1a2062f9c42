#include "worker_options.h"

#include "gpool/daemon_log.h"

namespace gpool::worker {

void WorkerOptions::declare(CLI::App& app) {
  app.add_option("--fd", fd, "connected client socket inherited from gpool-server");
  app.add_option("--device", device, "device ordinal to serve");
  app.add_option("--hello-seq", hello_seq, "sequence number of the client's Hello, answered by this worker");
  app.add_option("--backend", backend, "cuda or sim")->check(CLI::IsMember({"cuda", "sim"}));
  app.add_option("--cuda-driver", cuda_driver, "cuda backend: the driver library to load (default: libcuda.so.1 as the loader finds it)");
  app.add_option("--sim-kernels", sim.kernel_plugins, "sim backend: plugin(s) with host kernel implementations");
  app.add_option("--sim-memory", sim.memory_bytes, "sim backend: device memory in bytes");
  app.add_flag("--sim-fixed-addresses", sim.fixed_addresses, "sim backend: large allocations from one fixed address up");
  app.add_option("--sim-context-memory", sim.context_bytes, "sim backend: device memory the context takes once made");
  gpool::daemon::addLogLevelOption(app, log_level);
  app.add_option("--module-cache", module_cache_dir, "directory of the host's module image cache (none when empty)");
  app.add_option("--module-cache-max", module_cache_max, "bytes the module cache may hold");
  app.add_option("--jit-cache", jit_cache_dir,
                 "the directory where the driver keeps what it compiled of PTX: its lease's user's (none: it compiles at each load)");
  app.add_option("--memory-cap", memory_cap, "the lease's GPU memory cap in bytes (0: none)");
  app.add_option("--stall-timeout", stall_timeout_ms, "milliseconds a client may stop mid-frame (sending or reading) before it is dropped");
  app.add_option("--memory-budget-fd", budget_fd, "the lease's memory budget, shared with its other workers (from gpool-server)");
  app.add_option("--device-budget-fd", device_budget_fd, "sim: the device's memory, shared by every worker of the server");
  app.add_option("--device-busy-fd", device_busy_fd,
                 "sim: gpool-server's page of the device time each worker's kernels took (what the driver counts on a GPU)");
  app.add_option("--budget-slot", budget_slot, "this worker's slot in the shared budgets");
  app.add_option("--launch-counter-fd", launch_counter_fd,
                 "gpool-server's page of launch counters: this worker counts the kernels it launches in its slot");
  app.add_option("--compute-share", compute_share, "the lease's share of the device's time (below 1: its launches are paced)")
      ->check(CLI::Range(0.0, 1.0, "a fraction"));
  app.add_option("--compute-pace-fd", compute_pace_fd, "the lease's compute pace, shared with its other workers (from gpool-server)");
  app.add_option("--server-pid", server_pid, "the gpool-server that started this worker: the worker ends with it");
  app.add_flag("--inventory", inventory, "print this host's devices as JSON for the allocator, then exit");
  app.add_flag("--sim-separate-host", separate_host, "sim backend: this server's workers count as another host's for CUDA IPC");
  app.add_flag("!--no-peer-links", peer_links, "refuse links with other servers' workers (gpool-server --no-peer-links)");
  app.add_flag("!--no-sandbox", sandbox,
               "do not shut this worker in a Landlock sandbox before it serves its client (gpool-server --no-worker-sandbox)");
  app.add_flag("--probe", probe, "exit 0 when the real CUDA driver has a usable device (used by --backend auto)");
  app.add_option("--uid", uid, "the user to serve as, taken before anything else (gpool-server --worker-uids)")
      ->check(CLI::Range(1, 0x7fffffff));
  app.add_option("--gid", gid, "the group to serve as, with --uid")->check(CLI::Range(1, 0x7fffffff))->needs("--uid");
  app.add_option("--max-threads", max_threads, "with --uid: the threads and processes its user may have (0: no limit)")
      ->needs("--uid");
}

}  // namespace gpool::worker
