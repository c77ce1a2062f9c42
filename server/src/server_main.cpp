// gpool-server: accepts client connections, checks the handshake and hands each connection to a new
// gpool-worker process. It never initialises CUDA itself (--backend auto asks a probe process).
#include <CLI/CLI.hpp>
#include <signal.h>
#include <spdlog/spdlog.h>

#include "gpool/daemon_log.h"
#include "listener.h"

namespace {

// gpool-server's command line: ServerOptions, and the options given in other units than it keeps.
struct CommandLine {
  gpool::server::ServerOptions opt;
  std::string log_level = "info";
  double audit_s = 1, compute_s = 30;
  int64_t context_mib = -1;

  void declare(CLI::App& app) {
    declareDevice(app);
    declareCaches(app);
    declareAllocator(app);
    declareLimits(app);
    declareAudits(app);
    gpool::daemon::addLogLevelOption(app, log_level);
  }

  // After parsing: the options in ServerOptions' units, and the defaults that depend on others.
  void finish(const CLI::App& app) {
    opt.memory_audit_ms = static_cast<unsigned>(audit_s * 1000);
    if (context_mib >= 0) opt.context_memory = context_mib << 20;
    opt.compute_audit_ns = static_cast<int64_t>(compute_s * 1e9);
    // The default cache is under the server's home, which the workers' users may not reach.
    if (!opt.worker_uids.empty() && app.count("--module-cache") == 0) opt.module_cache = "/var/cache/gpool/modules";
    opt.log_level = log_level;
  }

  // Where clients connect, the backend, its workers, and the sim backend's settings.
  void declareDevice(CLI::App& app) {
    app.add_option("--listen", opt.listen, "address to listen on, HOST:PORT")->capture_default_str();
    app.add_option("--backend", opt.backend,
                   "cuda: the real driver; sim: host emulation for machines with no GPU (tests); auto: cuda when a "
                   "driver and a device are present, otherwise sim")
        ->check(CLI::IsMember({"auto", "cuda", "sim"}))
        ->capture_default_str();
    app.add_option("--worker", opt.worker_path, "gpool-worker binary (default: beside gpool-server)");
    app.add_option("--cuda-driver", opt.cuda_driver,
                   "cuda backend: the driver library workers load, such as the forward-compatibility driver "
                   "/usr/local/cuda/compat/libcuda.so.1 (default: libcuda.so.1 as the loader finds it). gpool's own "
                   "client library named here makes each worker forward to the gpool-server in GPOOL_SERVER: a test "
                   "of the cuda backend on a host without a GPU")
        ->check(CLI::ExistingFile);
    app.add_option("--sim-kernels", opt.sim_kernels, "sim backend: plugin(s) with host kernel implementations");
    app.add_option("--sim-memory", opt.sim_memory, "sim backend: device memory in bytes")->capture_default_str();
    app.add_option("--sim-context-memory", opt.sim_context_memory,
                   "sim backend: device memory each client's context takes once its worker makes it (on a GPU, "
                   "hundreds of MiB), to test what contexts cost")
        ->capture_default_str();
    app.add_flag("--sim-fixed-addresses", opt.sim_fixed_addresses,
                 "sim backend: every worker hands out the same device addresses, as a driver may in every process");
    app.add_flag("--sim-separate-host", opt.sim_separate_host,
                 "sim backend: CUDA IPC between this server's workers and another server's fails as between two hosts, "
                 "so two servers on one machine stand for two GPU hosts");
    app.add_flag("!--no-peer-links", opt.peer_links,
                 "workers neither listen for nor open connections to other servers' workers: copies between this "
                 "server's devices and another server's, in a lease of several, are relayed by the client instead");
    app.add_flag("!--no-worker-sandbox", opt.worker_sandbox,
                 "workers do not shut themselves in a Landlock sandbox before serving their clients (by default each "
                 "reads only the system's files, NVIDIA's devices, the module cache and /dev/shm, and cannot trace or "
                 "signal gpool-server or other workers: docs/security.md)");
  }

  // The module image cache and the users' JIT caches.
  void declareCaches(CLI::App& app) {
    opt.module_cache = gpool::server::defaultModuleCacheDir();
    app.add_option("--module-cache", opt.module_cache,
                   "directory where this host's workers keep module images by SHA-256, so each image crosses the "
                   "network once per host; 'none' turns the cache off")
        ->capture_default_str();
    opt.jit_cache = gpool::server::defaultJitCacheDir();
    app.add_option("--jit-cache", opt.jit_cache,
                   "directory where each lease's user has a JIT cache of their own (what the driver compiled of PTX, which "
                   "it loads in place of compiling again): a worker reaches its lease's user's alone, so no user's program "
                   "runs code another user's worker put there; with --worker-uids, a user's is lent to one of their leases' uids "
                   "at a time, and DIR must be one those uids can pass through; 'none' turns them off (workers compile PTX "
                   "at each load, as they do for clients without a lease)")
        ->capture_default_str();
    app.add_option("--jit-cache-max", opt.jit_cache_max,
                   "bytes the users' JIT caches may hold together: past it, the caches of the users whose leases started "
                   "here longest ago are removed whole (checked at most once a minute; the driver bounds each one: "
                   "CUDA_CACHE_MAXSIZE in gpool-server's environment)")
        ->capture_default_str();
    app.add_option("--module-cache-max", opt.module_cache_max,
                   "bytes the module cache may hold; least recently used images are removed past it")
        ->capture_default_str();
  }

  // The allocator this server registers with, its keys, and the name and address it goes by there.
  void declareAllocator(CLI::App& app) {
    app.add_option("--allocator", opt.allocator,
                   "http(s)://HOST:PORT of gpool-allocator (replicas: all of them, comma-separated; the one that leads is "
                   "followed): register this host's GPUs there and serve only clients whose lease token it signed (needs --token-key)");
    app.add_option("--allocator-ca", opt.allocator_ca,
                   "PEM file of the CA that signed an https:// allocator's certificate (default: the system's CA store)");
    app.add_option("--token-key", opt.token_key,
                   "the allocator's public token key, which verifies lease tokens (gpool-allocator writes it beside its "
                   "--token-key, as .pub)");
    opt.server_key = gpool::server::defaultServerKeyPath();
    app.add_option("--server-key", opt.server_key,
                   "this server's Ed25519 private key, signing its requests to the allocator (made, mode 0600, with its "
                   ".pub, when missing; an admin enrolls the .pub: gpool admin server enroll NAME FILE.pub)")
        ->capture_default_str();
    app.add_option("--name", opt.name, "this server's name at the allocator (default: the host name)");
    app.add_option("--advertise", opt.advertise, "HOST:PORT clients reach this server at (default: from --listen)");
  }

  // What clients may take: their share of the device's time, connections, handshakes, stalls, the
  // workers' users and their threads.
  void declareLimits(CLI::App& app) {
    app.add_option("--client-share", opt.client_share,
                   "without --allocator: the share of its device's time each client's kernels may use, below 1 to "
                   "pace them (with an allocator, each lease's fraction is its share)")
        ->capture_default_str()
        ->check(CLI::Range(0.01, 1.0));
    app.add_option("--max-clients", opt.max_clients, "concurrent client connections accepted (at most 256)")
        ->capture_default_str()
        ->check(CLI::Range(1, 256));
    app.add_option("--max-clients-per-lease", opt.max_clients_per_lease,
                   "concurrent connections one lease's token may open (each process using CUDA opens one)")
        ->capture_default_str();
    app.add_option("--handshake-timeout", opt.handshake_timeout_ms, "milliseconds a new connection has to say hello")
        ->capture_default_str();
    app.add_option("--max-pending-per-address", opt.max_pending_per_address,
                   "connections one client address (for IPv6, one /64 network) may have in their handshake at once (until its worker has each); "
                   "more from it are closed as they come (default: --max-clients)")
        ->check(CLI::Range(1u, 65536u));
    app.add_option("--stall-timeout", opt.stall_timeout_ms,
                   "milliseconds a client may stop in the middle of a frame it sends, or of a reply it reads, before its "
                   "connection is closed (a client quiet between calls is never dropped)")
        ->capture_default_str()
        ->check(CLI::Range(100u, 3600000u));
    app.add_option("--worker-uids", opt.worker_uids,
                   "FIRST-LAST: run each lease's workers as a uid of this range of its own (and the group of that "
                   "number), so a worker taken over by its client can reach neither this server's key nor another "
                   "lease's workers; the uids must be gpool's alone (every process of one is killed when its lease "
                   "ends). Needs root. Clients without a lease share the first. Default: workers run as this server");
    app.add_option("--max-threads-per-lease", opt.max_threads_per_lease,
                   "with --worker-uids: the threads and processes a lease's user may have, all its workers together "
                   "(RLIMIT_NPROC), so a worker taken over cannot fork the host to a halt; 0: no limit")
        ->capture_default_str();
  }

  // The audits of what each lease's processes use as the driver counts it, and the metrics.
  void declareAudits(CLI::App& app) {
    app.add_option("--memory-audit", audit_s,
                   "seconds between reads of the device memory (and time) each process uses as the driver counts it (NVML; on sim, "
                   "the emulated device's count): a lease whose processes hold more than its cap and --context-memory for "
                   "each of its workers, at two reads running, has them ended, since a worker taken over by its client "
                   "could go around its own check of the cap (0: no audit)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 3600.0));
    app.add_option("--context-memory", context_mib,
                   "MiB of device memory each worker may hold past its lease's cap, as the driver counts it: its context, "
                   "module code and the driver's own (default: 2048 on a GPU; on sim, --sim-context-memory)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
    app.add_option("--compute-audit", compute_s,
                   "seconds of device time a lease below a whole GPU may take past its share, as the driver counts it (NVML; "
                   "on sim, the emulated device's count), before its processes are ended: one kernel longer than this over "
                   "(1 - share), or a worker taken over by its client that went around its pacing, would otherwise keep "
                   "the GPU from the other leases on it (read at each --memory-audit tick, 1 s when that is 0; 0: no audit)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 86400.0));
    app.add_option("--metrics", opt.metrics,
                   "serve Prometheus metrics at http://HOST:PORT/metrics: clients, refusals, and per lease its workers, "
                   "launches, memory against its cap and device time against its share (default: none)");
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gpool-server: serves CUDA clients over TCP, one gpool-worker process per client connection.\n"
      "Clients point GPOOL_SERVER=HOST:PORT at it."};
  CommandLine cl;
  cl.declare(app);
  CLI11_PARSE(app, argc, argv);
  cl.finish(app);
  const gpool::server::ServerOptions& opt = cl.opt;
  // An https:// allocator that closes its connection mid-request must not end this server: OpenSSL
  // writes with write(), which raises SIGPIPE. (Its workers inherit this; they write with asio, which
  // never raised it.)
  ::signal(SIGPIPE, SIG_IGN);
  if (!opt.allocator.empty() && opt.token_key.empty()) {
    std::fprintf(stderr, "--allocator needs --token-key FILE: the public key that verifies the allocator's lease tokens "
                         "(gpool-allocator writes it beside its database, as .token.pub)\n");
    return 2;
  }

  gpool::daemon::startLog("gpool-server", cl.log_level);
  try {
    return gpool::server::runServer(opt);
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
    return 1;
  }
}
