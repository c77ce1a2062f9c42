// gpool-worker: serves one client connection handed over by gpool-server, on one device, then exits
// (the driver frees everything the client held when this process ends).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cuda.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "cuda_backend.h"
#include "dispatcher.h"
#include "export_records.h"
#include "gpool/daemon_log.h"
#include "output_relay.h"
#include "revocation.h"
#include "gpool/hex.h"
#include "gpool/printable.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/gpu_uuid.h"
#include "gpool/protocol/handshake.h"
#include "gpool/protocol/ucx_transport.h"
#include "sim_backend.h"
#include "worker_options.h"
#include "worker_sandbox.h"
#include "worker_user.h"

namespace {

using gpool::worker::Backend;
using gpool::worker::WorkerOptions;

// A worker lives no longer than the gpool-server that started it: the kernel kills it when the server
// dies (the server's threads live as long as it does), and one whose server is already gone exits.
bool bindLifetimeToServer(pid_t server) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return false;
  return server == 0 || ::getppid() == server;
}

// Before anything else: the seal of its export records, the user it serves as, the driver's JIT cache.
// False (after saying why) when it cannot become that user.
bool prepareProcess(WorkerOptions& o) {
  // The seal, from its gpool-server (export_records.h): out of its environment at once.
  if (const char* seal = std::getenv("GPOOL_RECORD_SEAL")) {
    if (gpool::budget::RecordSeal s; gpool::unhexTo(seal, s.data(), s.size())) gpool::budget::sealRecordsWith(s);
    ::unsetenv("GPOOL_RECORD_SEAL");
  }
  // Everything after it, the driver included, runs as the lease's user, and the parent-death signal
  // (bindLifetimeToServer) would not survive the change.
  if (std::string why; o.uid > 0 && !gpool::worker::becomeUser(o.uid, o.gid > 0 ? o.gid : o.uid, o.max_threads, why)) {
    std::fprintf(stderr, "gpool-worker: cannot become uid %d: %s (gpool-server --worker-uids needs to run as root)\n", o.uid,
                 why.c_str());
    return false;
  }
  // The driver's JIT cache is its lease's user's alone (gpool-server's jit_caches.h), and the sandbox lets
  // it reach that one; without one, the driver compiles PTX at each load rather than share a cache.
  if (!o.jit_cache_dir.empty()) {
    ::setenv("CUDA_CACHE_PATH", o.jit_cache_dir.c_str(), 1);
  } else {
    ::unsetenv("CUDA_CACHE_PATH");
    ::setenv("CUDA_CACHE_DISABLE", "1", 1);
  }
  if (o.separate_host) o.sim.host_salt = static_cast<uint64_t>(o.server_pid) | (1ull << 63);
  return true;
}

std::unique_ptr<Backend> makeBackend(const WorkerOptions& o) {
  if (o.backend == "cuda") return gpool::worker::makeCudaBackend();
  return std::make_unique<gpool::worker::SimBackend>(o.sim);
}

// --inventory: one line of JSON, [{index, uuid, model, memory, sms}], each device opened in turn.
int printInventory(const WorkerOptions& o) {
  std::string out = "[";
  for (int d = 0; d < 64; ++d) {
    std::unique_ptr<Backend> b = makeBackend(o);
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

// gpool-server's pages this worker counts in: the lease's memory budget and compute pace (shared with its
// other workers), the launch counters, and on sim the device's memory and busy time.
struct SharedPages {
  gpool::worker::SharedLimits limits;
  std::shared_ptr<gpool::budget::SharedBudget> launch_counter;
  std::shared_ptr<gpool::budget::ComputePace> pace;

  // Throws when a descriptor is not such a page.
  static SharedPages adopt(WorkerOptions& o) {
    using gpool::budget::SharedBudget;
    SharedPages p{{nullptr, nullptr, o.budget_slot}, nullptr, nullptr};
    if (o.compute_share > 0 && o.compute_share < 1)
      p.pace = o.compute_pace_fd >= 0 ? gpool::budget::ComputePace::adopt(o.compute_pace_fd) : gpool::budget::ComputePace::create();
    if (o.budget_fd >= 0) p.limits.lease = SharedBudget::adopt(o.budget_fd);
    if (o.device_budget_fd >= 0) p.limits.device = SharedBudget::adopt(o.device_budget_fd);
    if (o.launch_counter_fd >= 0) p.launch_counter = SharedBudget::adopt(o.launch_counter_fd);
    if (o.device_busy_fd >= 0) o.sim.busy = SharedBudget::adopt(o.device_busy_fd);
    o.sim.device = p.limits.device;
    o.sim.slot = o.budget_slot;
    return p;
  }
};

// Opens the device; the answer to the client's Hello says what went wrong when it cannot.
std::unique_ptr<Backend> openDevice(const WorkerOptions& o, gpool::proto::HelloReply& hello) {
  std::unique_ptr<Backend> backend;
  try {
    backend = makeBackend(o);
    if (o.memory_cap) backend->setMemoryCap(o.memory_cap);
    if (!o.peer_links) backend->refusePeerLinks();
    hello.status = backend->open(o.device, hello);
    if (hello.status != 0)
      hello.error = "device " + std::to_string(o.device) + " cannot be opened on the " + o.backend + " backend (CUresult " +
                    std::to_string(hello.status) + ")";
  } catch (const std::exception& e) {
    hello.status = 999;  // CUDA_ERROR_UNKNOWN
    hello.error = e.what();
  }
  return backend;
}

void advertiseFeatures(gpool::proto::HelloReply& hello, bool relays_output, bool caches_modules) {
  hello.features |= gpool::proto::kFeatureAlive | gpool::proto::kFeatureShm | gpool::proto::kFeatureEnded;
  if (relays_output) hello.features |= gpool::proto::kFeatureOutput;
  if (std::string why; gpool::proto::ucxAvailable(why)) hello.features |= gpool::proto::kFeatureRdma;
  if (gpool::proto::hostHasRdmaDevice()) hello.features |= gpool::proto::kFeatureRdmaDevice;
  if (caches_modules) hello.features |= gpool::proto::kFeatureModuleCache;
}

// Shuts the worker in its sandbox before the first call of its client is read; the Hello says so when it
// cannot be.
void shutInSandbox(const WorkerOptions& o, gpool::proto::HelloReply& hello) {
  std::string why;
  std::error_code ec;
  auto threads = std::distance(std::filesystem::directory_iterator("/proc/self/task", ec), std::filesystem::directory_iterator());
  bool every_thread = false;
  int abi = gpool::worker::enterSandbox(gpool::worker::workerPaths(o.module_cache_dir, o.jit_cache_dir, o.sim.kernel_plugins), why,
                                        &every_thread);
  if (abi > 0 && !every_thread && threads > 1)  // (before ABI 8, Landlock binds the calling thread and those it starts)
    spdlog::warn("{} thread(s) started before the sandbox stay outside its rules (Landlock ABI {}; from ABI 8, Linux 7.0, it binds them too)",
                 threads - 1, abi);
  if (abi < 0) {
    hello.status = 999;  // CUDA_ERROR_UNKNOWN
    hello.error = "the worker cannot enter its sandbox: " + why + " (gpool-server --no-worker-sandbox serves without one)";
  } else if (abi == 0) {
    spdlog::debug("not sandboxed: {}", why);
  } else {
    spdlog::debug("sandboxed (Landlock ABI {})", abi);
  }
}

// Serves the client's calls until it leaves, then stays while other processes hold memory it exported.
void serve(const WorkerOptions& o, Backend& backend, gpool::proto::Transport& transport, const gpool::proto::HelloReply& hello,
           const SharedPages& shared, gpool::worker::ModuleCache* cache, gpool::worker::OutputRelay* output,
           gpool::worker::Revocation& revocation) {
  // The lease may hold up to its cap, and never more than the device has (both are total_mem).
  gpool::worker::Dispatcher dispatcher(backend, transport, gpool::worker::MemoryLedger(hello.devices[0].total_mem, shared.limits),
                                       cache);
  dispatcher.setStallTimeout(o.stall_timeout_ms);
  dispatcher.relayOutput(output);
  if (shared.launch_counter) dispatcher.countLaunchesIn(shared.launch_counter, o.budget_slot);
  if (shared.pace) dispatcher.shareCompute(std::make_unique<gpool::worker::ComputeShare>(o.compute_share, shared.pace, backend));
  revocation.serving(&dispatcher);
  auto result = dispatcher.serve();
  if (result.clean)
    spdlog::info("client {} disconnected after {} messages ({}); releasing its resources", transport.peer(), result.frames,
                 result.transport);
  else
    spdlog::warn("closing connection to {}: {}", transport.peer(), result.reason);
  revocation.serving(nullptr);
  // The memory lives on, and so does this worker, also past its lease's end (revocation.h): the allocator
  // keeps the lease's share held meanwhile, as the GPU's memory is. gpool-server's own end still ends it
  // (PR_SET_PDEATHSIG).
  if (dispatcher.importersHold()) dispatcher.waitForImporters();
  if (const auto* share = dispatcher.computeShare())
    spdlog::info("compute share {}: the client's kernels ran {:.3f} s on the device; its launches waited {:.3f} s for its share",
                 share->share(), share->chargedNs() / 1e9, share->pacedNs() / 1e9);
  spdlog::info("module images: {} received ({} bytes), {} loaded from the host cache ({} bytes not sent)", result.images_received,
               result.image_bytes_received, result.images_from_cache, result.image_bytes_from_cache);
}

// The client's connection: from gpool-server's descriptor, answered with the Hello, then served.
int serveClient(WorkerOptions& o) {
  if (!bindLifetimeToServer(o.server_pid)) {
    spdlog::error("gpool-server {} is gone (or the worker cannot follow it); not serving its client", o.server_pid);
    return 2;
  }
  // Before any other thread starts: SIGTERM (the lease ended) is for the revocation watcher's only.
  gpool::worker::Revocation& revocation = gpool::worker::Revocation::watch(o.server_pid ? o.server_pid : ::getppid());
  // Ctrl-C at the terminal gpool-server runs in reaches its workers too (one process group); the server
  // then lets them finish with their clients, and they end with it in any case (bindLifetimeToServer).
  ::signal(SIGINT, SIG_IGN);
  std::unique_ptr<gpool::proto::Transport> transport;
  SharedPages shared;
  try {
    transport = gpool::proto::adoptTcpSocket(o.fd);
    transport->setStallTimeout(o.stall_timeout_ms);
    shared = SharedPages::adopt(o);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
  // Before the driver starts: what its kernels print goes to fd 1, which the client then reads.
  std::unique_ptr<gpool::worker::OutputRelay> output = gpool::worker::OutputRelay::captureStdout();
  gpool::proto::HelloReply hello;
  std::unique_ptr<Backend> backend = openDevice(o, hello);
  std::unique_ptr<gpool::worker::ModuleCache> cache;
  if (!o.module_cache_dir.empty()) cache = std::make_unique<gpool::worker::ModuleCache>(o.module_cache_dir, o.module_cache_max);
  advertiseFeatures(hello, output != nullptr, cache != nullptr);
  if (o.sandbox && hello.status == 0) shutInSandbox(o, hello);
  // Only now the worker's own threads: the sandbox binds the threads started after it is entered.
  revocation.start();
  if (output) output->start();
  try {
    auto payload = gpool::proto::encode(hello);
    gpool::proto::sendFrame(*transport, gpool::proto::kMsgHello, gpool::proto::kIsReply, o.hello_seq, payload.data(), payload.size());
  } catch (const std::exception& e) {
    spdlog::warn("client went away before the handshake completed: {}", e.what());
    return 0;
  }
  if (hello.status != 0) {
    spdlog::error("{}", hello.error);
    return 1;
  }
  spdlog::info("serving {} on {} device {} ({})", transport->peer(), o.backend, o.device, gpool::printable(hello.devices[0].name));
  serve(o, *backend, *transport, hello, shared, cache.get(), output.get(), revocation);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpool-worker: executes one client's CUDA calls (started by gpool-server, not by hand)"};
  WorkerOptions o;
  o.declare(app);
  CLI11_PARSE(app, argc, argv);
  if (!prepareProcess(o)) return 2;

  gpool::daemon::startLog("gpool-worker", o.log_level);
  gpool::worker::useCudaDriver(o.cuda_driver);

  if (o.probe) {
    std::string why;
    bool ok = gpool::worker::cudaDriverUsable(&why);
    std::puts(ok ? "cuda" : why.c_str());
    return ok ? 0 : 1;
  }
  if (o.inventory) return printInventory(o);
  if (o.fd < 0) {
    spdlog::error("no client socket (--fd); gpool-worker is started by gpool-server");
    return 2;
  }
  return serveClient(o);
}
