// gpool-server's accept loop, handshake check and worker spawning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpool::server {

struct ServerOptions {
  std::string listen = "0.0.0.0:7420";
  std::string backend = "auto";
  std::string worker_path;  // empty: gpool-worker beside this executable
  std::string cuda_driver;  // the cuda backend's driver library; empty: libcuda.so.1 as the loader finds it
  std::vector<std::string> sim_kernels;
  uint64_t sim_memory = 16ull << 30;
  uint64_t sim_context_memory = 0;  // what each worker's context takes of it, once made
  bool sim_fixed_addresses = false;
  bool sim_separate_host = false;
  bool peer_links = true;  // workers copy straight to other servers' workers of the same lease
  bool worker_sandbox = true;  // workers shut themselves in a Landlock sandbox (server/worker/worker_sandbox.h)
  unsigned max_clients = 64;
  unsigned max_clients_per_lease = 16;  // connections one lease may hold at once (its processes)
  unsigned handshake_timeout_ms = 10000;
  unsigned max_pending_per_address = 0;  // connections one address may have in their handshake at once (0: max_clients)
  unsigned stall_timeout_ms = 60000;  // a client that stops mid-frame (sending, or reading replies) is dropped
  std::string log_level = "info";
  std::string module_cache;  // directory shared by this host's workers; "none" disables it
  std::string jit_cache;     // directory of each lease's user's JIT cache (jit_caches.h); "none" disables them
  uint64_t jit_cache_max = 8ull << 30;  // what they may hold together
  std::string allocator;     // http(s)://HOST:PORT of gpool-allocator; empty: serve anyone, no leases
  std::string allocator_ca;  // PEM CA file verifying an https:// allocator ("" = the system's CA store)
  std::string token_key;     // the allocator's public token key (PEM) that verifies lease tokens
  std::string server_key;    // this server's Ed25519 private key (PEM; created when missing), signing its requests
  std::string name;          // this server's name at the allocator (default: the host name)
  std::string advertise;     // HOST:PORT clients reach this server at (default: from --listen)
  uint64_t module_cache_max = 8ull << 30;
  double client_share = 1.0;  // without an allocator: the share of its device's time each client's kernels get
  std::string metrics;        // HOST:PORT serving /metrics (server_metrics.h); empty: none
  std::string worker_uids;    // FIRST-LAST: each lease's workers run as a uid of its own (worker_users.h); empty: as this server
  unsigned max_threads_per_lease = 4096;  // with worker_uids: the threads and processes a lease's user may have
  unsigned memory_audit_ms = 1000;  // how often leases' device memory (and time) is read from the driver (use_audits.h); 0: memory never
  int64_t context_memory = -1;  // bytes each worker may hold past its lease's cap; -1: 2 GiB, on sim --sim-context-memory
  int64_t compute_audit_ns = 30'000'000'000;  // device time a lease may take past its share before it is ended (compute_audit.h); 0: never
};

// Where module images are cached when --module-cache is not given.
std::string defaultModuleCacheDir();
// Where each lease's user's JIT cache is kept when --jit-cache is not given.
std::string defaultJitCacheDir();
// Where this server's key is kept when --server-key is not given.
std::string defaultServerKeyPath();

// Runs until SIGINT/SIGTERM; returns the process exit code.
int runServer(ServerOptions options);

}  // namespace gpool::server
