// gpool-worker: serves one client connection handed over by gpool-server, on one device, then exits
// (the driver frees everything the client held when this process ends).
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cuda.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "cuda_backend.h"
#include "dispatcher.h"
#include "export_records.h"
#include "output_relay.h"
#include "revocation.h"
#include "gpool/hex.h"
#include "gpool/printable.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/gpu_uuid.h"
#include "gpool/protocol/handshake.h"
#include "gpool/protocol/ucx_transport.h"
#include "sim_backend.h"
#include "worker_sandbox.h"
#include "worker_user.h"

namespace {

// A worker lives no longer than the gpool-server that started it: the kernel kills it when the server
// dies (the server's threads live as long as it does), and one whose server is already gone exits.
bool bindLifetimeToServer(pid_t server) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return false;
  return server == 0 || ::getppid() == server;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpool-worker: executes one client's CUDA calls (started by gpool-server, not by hand)"};
  int fd = -1;
  int device = 0;
  uint64_t hello_seq = 0;
  std::string backend_name = "sim";
  std::string log_level = "info";
  bool probe = false, inventory = false, peer_links = true;
  uint64_t memory_cap = 0;
  pid_t server_pid = 0;
  std::string module_cache_dir, jit_cache_dir;
  uint64_t module_cache_max = 8ull << 30;
  gpool::worker::SimOptions sim;
  app.add_option("--fd", fd, "connected client socket inherited from gpool-server");
  app.add_option("--device", device, "device ordinal to serve");
  app.add_option("--hello-seq", hello_seq, "sequence number of the client's Hello, answered by this worker");
  app.add_option("--backend", backend_name, "cuda or sim")->check(CLI::IsMember({"cuda", "sim"}));
  app.add_option("--sim-kernels", sim.kernel_plugins, "sim backend: plugin(s) with host kernel implementations");
  app.add_option("--sim-memory", sim.memory_bytes, "sim backend: device memory in bytes");
  app.add_flag("--sim-fixed-addresses", sim.fixed_addresses, "sim backend: large allocations from one fixed address up");
  app.add_option("--sim-context-memory", sim.context_bytes, "sim backend: device memory the context takes once made");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_option("--module-cache", module_cache_dir, "directory of the host's module image cache (none when empty)");
  app.add_option("--module-cache-max", module_cache_max, "bytes the module cache may hold");
  app.add_option("--jit-cache", jit_cache_dir,
                 "the directory where the driver keeps what it compiled of PTX: its lease's user's (none: it compiles at each load)");
  app.add_option("--memory-cap", memory_cap, "the lease's GPU memory cap in bytes (0: none)");
  int stall_timeout_ms = 60000;
  app.add_option("--stall-timeout", stall_timeout_ms, "milliseconds a client may stop mid-frame (sending or reading) before it is dropped");
  int budget_fd = -1, device_budget_fd = -1, budget_slot = 0;
  app.add_option("--memory-budget-fd", budget_fd, "the lease's memory budget, shared with its other workers (from gpool-server)");
  app.add_option("--device-budget-fd", device_budget_fd, "sim: the device's memory, shared by every worker of the server");
  int device_busy_fd = -1;
  app.add_option("--device-busy-fd", device_busy_fd,
                 "sim: gpool-server's page of the device time each worker's kernels took (what the driver counts on a GPU)");
  app.add_option("--budget-slot", budget_slot, "this worker's slot in the shared budgets");
  int launch_counter_fd = -1;
  app.add_option("--launch-counter-fd", launch_counter_fd,
                 "gpool-server's page of launch counters: this worker counts the kernels it launches in its slot");
  double compute_share = 1.0;
  int compute_pace_fd = -1;
  app.add_option("--compute-share", compute_share, "the lease's share of the device's time (below 1: its launches are paced)")
      ->check(CLI::Range(0.0, 1.0, "a fraction"));
  app.add_option("--compute-pace-fd", compute_pace_fd, "the lease's compute pace, shared with its other workers (from gpool-server)");
  app.add_option("--server-pid", server_pid, "the gpool-server that started this worker: the worker ends with it");
  app.add_flag("--inventory", inventory, "print this host's devices as JSON for the allocator, then exit");
  bool separate_host = false;
  app.add_flag("--sim-separate-host", separate_host, "sim backend: this server's workers count as another host's for CUDA IPC");
  app.add_flag("!--no-peer-links", peer_links, "refuse links with other servers' workers (gpool-server --no-peer-links)");
  bool sandbox = true;
  app.add_flag("!--no-sandbox", sandbox,
               "do not shut this worker in a Landlock sandbox before it serves its client (gpool-server --no-worker-sandbox)");
  app.add_flag("--probe", probe, "exit 0 when the real CUDA driver has a usable device (used by --backend auto)");
  int uid = -1, gid = -1;
  app.add_option("--uid", uid, "the user to serve as, taken before anything else (gpool-server --worker-uids)")
      ->check(CLI::Range(1, 0x7fffffff));
  app.add_option("--gid", gid, "the group to serve as, with --uid")->check(CLI::Range(1, 0x7fffffff))->needs("--uid");
  unsigned max_threads = 0;
  app.add_option("--max-threads", max_threads, "with --uid: the threads and processes its user may have (0: no limit)")
      ->needs("--uid");
  CLI11_PARSE(app, argc, argv);
  // The seal of its export records, from its gpool-server (export_records.h): out of its environment at once.
  if (const char* seal = std::getenv("GPOOL_RECORD_SEAL")) {
    if (gpool::budget::RecordSeal s; gpool::unhexTo(seal, s.data(), s.size())) gpool::budget::sealRecordsWith(s);
    ::unsetenv("GPOOL_RECORD_SEAL");
  }
  // First: everything after it, the driver included, runs as the lease's user, and the parent-death
  // signal (bindLifetimeToServer) would not survive the change.
  if (std::string why; uid > 0 && !gpool::worker::becomeUser(uid, gid > 0 ? gid : uid, max_threads, why)) {
    std::fprintf(stderr, "gpool-worker: cannot become uid %d: %s (gpool-server --worker-uids needs to run as root)\n", uid,
                 why.c_str());
    return 2;
  }
  // The driver's JIT cache is its lease's user's alone (gpool-server's jit_caches.h), and the sandbox lets
  // it reach that one; without one, the driver compiles PTX at each load rather than share a cache.
  if (!jit_cache_dir.empty()) {
    ::setenv("CUDA_CACHE_PATH", jit_cache_dir.c_str(), 1);
  } else {
    ::unsetenv("CUDA_CACHE_PATH");
    ::setenv("CUDA_CACHE_DISABLE", "1", 1);
  }
  if (separate_host) sim.host_salt = static_cast<uint64_t>(server_pid) | (1ull << 63);

  auto logger = spdlog::stderr_color_mt("gpool-worker");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ gpool-worker[%P] %v");

  if (probe) {
    std::string why;
    bool ok = gpool::worker::cudaDriverUsable(&why);
    std::puts(ok ? "cuda" : why.c_str());
    return ok ? 0 : 1;
  }
  if (inventory) {
    // One line of JSON: [{index, uuid, model, memory, sms}], each device opened in turn.
    std::string out = "[";
    for (int d = 0; d < 64; ++d) {
      std::unique_ptr<gpool::worker::Backend> b;
      if (backend_name == "cuda") b = gpool::worker::makeCudaBackend();
      else b = std::make_unique<gpool::worker::SimBackend>(sim);
      gpool::proto::HelloReply h;
      if (b->open(d, h) != 0 || h.devices.empty()) break;
      const auto& dev = h.devices[0];
      std::string uuid = gpool::proto::gpuUuidText(dev.uuid.data());
      int sms = dev.attributes.size() > CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? dev.attributes[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] : 0;
      std::string model;
      for (char c : dev.name) model += (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 32) ? '_' : c;
      out += (d ? "," : "") + std::string("{\"index\":") + std::to_string(d) + ",\"uuid\":\"" + uuid + "\",\"model\":\"" +
             model + "\",\"memory\":" + std::to_string(dev.total_mem) + ",\"sms\":" + std::to_string(sms) + "}";
    }
    std::puts((out + "]").c_str());
    return out == "[" ? 1 : 0;
  }
  if (fd < 0) {
    spdlog::error("no client socket (--fd); gpool-worker is started by gpool-server");
    return 2;
  }
  if (!bindLifetimeToServer(server_pid)) {
    spdlog::error("gpool-server {} is gone (or the worker cannot follow it); not serving its client", server_pid);
    return 2;
  }

  // Before any other thread starts: SIGTERM (the lease ended) is for the revocation watcher's only.
  gpool::worker::Revocation& revocation = gpool::worker::Revocation::watch(server_pid ? server_pid : ::getppid());
  // Ctrl-C at the terminal gpool-server runs in reaches its workers too (one process group); the server
  // then lets them finish with their clients, and they end with it in any case (bindLifetimeToServer).
  ::signal(SIGINT, SIG_IGN);
  std::unique_ptr<gpool::proto::Transport> transport;
  try {
    transport = gpool::proto::adoptTcpSocket(fd);
    transport->setStallTimeout(stall_timeout_ms);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }

  gpool::worker::SharedLimits shared{nullptr, nullptr, budget_slot};
  std::shared_ptr<gpool::budget::SharedBudget> launch_counter;
  std::shared_ptr<gpool::budget::ComputePace> pace;
  try {
    if (compute_share > 0 && compute_share < 1)
      pace = compute_pace_fd >= 0 ? gpool::budget::ComputePace::adopt(compute_pace_fd) : gpool::budget::ComputePace::create();
    if (budget_fd >= 0) shared.lease = gpool::budget::SharedBudget::adopt(budget_fd);
    if (device_budget_fd >= 0) shared.device = gpool::budget::SharedBudget::adopt(device_budget_fd);
    if (launch_counter_fd >= 0) launch_counter = gpool::budget::SharedBudget::adopt(launch_counter_fd);
    if (device_busy_fd >= 0) sim.busy = gpool::budget::SharedBudget::adopt(device_busy_fd);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
  // Before the driver starts: what its kernels print goes to fd 1, which the client then reads.
  std::unique_ptr<gpool::worker::OutputRelay> output = gpool::worker::OutputRelay::captureStdout();
  std::unique_ptr<gpool::worker::Backend> backend;
  gpool::proto::HelloReply hello;
  try {
    sim.device = shared.device;
    sim.slot = budget_slot;
    if (backend_name == "cuda")
      backend = gpool::worker::makeCudaBackend();
    else
      backend = std::make_unique<gpool::worker::SimBackend>(sim);
    if (memory_cap) backend->setMemoryCap(memory_cap);
    if (!peer_links) backend->refusePeerLinks();
    hello.status = backend->open(device, hello);
    if (hello.status != 0) hello.error = "device " + std::to_string(device) + " cannot be opened on the " + backend_name + " backend (CUresult " + std::to_string(hello.status) + ")";
  } catch (const std::exception& e) {
    hello.status = 999;  // CUDA_ERROR_UNKNOWN
    hello.error = e.what();
  }
  hello.features |= gpool::proto::kFeatureAlive | gpool::proto::kFeatureShm | gpool::proto::kFeatureEnded;
  if (output) hello.features |= gpool::proto::kFeatureOutput;
  if (std::string why; gpool::proto::ucxAvailable(why)) hello.features |= gpool::proto::kFeatureRdma;
  if (gpool::proto::hostHasRdmaDevice()) hello.features |= gpool::proto::kFeatureRdmaDevice;
  std::unique_ptr<gpool::worker::ModuleCache> cache;
  if (!module_cache_dir.empty()) {
    cache = std::make_unique<gpool::worker::ModuleCache>(module_cache_dir, module_cache_max);
    hello.features |= gpool::proto::kFeatureModuleCache;
  }
  if (sandbox && hello.status == 0) {  // (before the first call of its client is read)
    std::string why;
    int abi = gpool::worker::enterSandbox(gpool::worker::workerPaths(module_cache_dir, jit_cache_dir, sim.kernel_plugins), why);
    if (abi < 0) {
      hello.status = 999;  // CUDA_ERROR_UNKNOWN
      hello.error = "the worker cannot enter its sandbox: " + why + " (gpool-server --no-worker-sandbox serves without one)";
    } else if (abi == 0) {
      spdlog::debug("not sandboxed: {}", why);
    } else {
      spdlog::debug("sandboxed (Landlock ABI {})", abi);
    }
  }
  try {
    auto payload = gpool::proto::encode(hello);
    gpool::proto::sendFrame(*transport, gpool::proto::kMsgHello, gpool::proto::kIsReply, hello_seq, payload.data(), payload.size());
  } catch (const std::exception& e) {
    spdlog::warn("client went away before the handshake completed: {}", e.what());
    return 0;
  }
  if (hello.status != 0) {
    spdlog::error("{}", hello.error);
    return 1;
  }
  spdlog::info("serving {} on {} device {} ({})", transport->peer(), backend_name, device, gpool::printable(hello.devices[0].name));
  // The lease may hold up to its cap, and never more than the device has (both are total_mem).
  gpool::worker::Dispatcher dispatcher(*backend, *transport,
                                       gpool::worker::MemoryLedger(hello.devices[0].total_mem, shared), cache.get());
  dispatcher.setStallTimeout(stall_timeout_ms);
  dispatcher.relayOutput(output.get());
  if (launch_counter) dispatcher.countLaunchesIn(launch_counter, budget_slot);
  if (pace) dispatcher.shareCompute(std::make_unique<gpool::worker::ComputeShare>(compute_share, pace, *backend));
  revocation.serving(&dispatcher);
  auto result = dispatcher.serve();
  if (result.clean)
    spdlog::info("client {} disconnected after {} messages ({}); releasing its resources", transport->peer(), result.frames,
                 result.transport);
  else
    spdlog::warn("closing connection to {}: {}", transport->peer(), result.reason);
  revocation.serving(nullptr);
  if (dispatcher.importersHold()) {
    // The memory lives on, and so does this worker, also past its lease's end (revocation.h): the
    // allocator keeps the lease's share held meanwhile, as the GPU's memory is. gpool-server's own end
    // still ends it (PR_SET_PDEATHSIG).
    dispatcher.waitForImporters();
  }
  if (const auto* share = dispatcher.computeShare())
    spdlog::info("compute share {}: the client's kernels ran {:.3f} s on the device; its launches waited {:.3f} s for its share",
                 share->share(), share->chargedNs() / 1e9, share->pacedNs() / 1e9);
  spdlog::info("module images: {} received ({} bytes), {} loaded from the host cache ({} bytes not sent)",
               result.images_received, result.image_bytes_received, result.images_from_cache,
               result.image_bytes_from_cache);
  return 0;
}
