// gpool-server: how a worker starts for a client whose Hello was accepted: its options, the pages it shares
// with its lease's other workers, its slot, its user, its process.
#include "server_class.h"

extern char** environ;

namespace gpool::server {

// The lowest slot no running worker holds, nor an ended one whose exported memory is still held (there are
// at most --max-clients <= kSlots workers; held slots beyond that wait for their importers).
int Server::freeSlot() const {
  std::set<int> taken;
  for (const auto& [pid, w] : workers_by_pid_) taken.insert(w.slot);
  int slot = 0;
  while (taken.count(slot) || held_exports_.holdsSlot(slot)) ++slot;
  return slot;
}

// The share's state, made at its first worker: throws std::runtime_error when a page cannot be made.
Server::ShareState& Server::shareOf(const token::Claims& lease) {
  auto [it, made] = shares_.try_emplace({lease.lease, lease.share});
  ShareState& s = it->second;
  if (made) {
    s.device = lease.device, s.fraction = lease.fraction;
    try {
      if (lease.memory) s.memory = budget::SharedBudget::create(lease.memory);
      if (lease.fraction < 1) s.pace = budget::ComputePace::create();
    } catch (...) {
      shares_.erase(it);
      throw;
    }
  }
  return s;
}

// The page the lease's workers count their launches in, made at its first worker. Each lease has its
// own, so a worker reaches no other lease's count (one page for all let any worker rewrite every lease's).
// Throws std::runtime_error when it cannot be made.
std::shared_ptr<budget::SharedBudget> Server::launchPageOf(const std::string& lease) {
  auto& page = launch_pages_[lease];
  if (!page) page = budget::SharedBudget::create(UINT64_MAX);  // (counters: no limit)
  return page;
}

// What every worker of this server is told: its backend, the sim's settings, peer links, the module cache.
std::vector<std::string> Server::workerOptions(const proto::HelloRequest& hello, uint64_t hello_seq) const {
  std::vector<std::string> args{opt_.worker_path, "--fd", "3", "--device", std::to_string(hello.device), "--hello-seq",
                                std::to_string(hello_seq), "--backend", backend_, "--log-level", opt_.log_level,
                                "--server-pid", std::to_string(::getpid()), "--stall-timeout",
                                std::to_string(opt_.stall_timeout_ms)};
  if (backend_ == "sim") {
    args.insert(args.end(), {"--sim-memory", std::to_string(opt_.sim_memory)});
    if (opt_.sim_context_memory)
      args.insert(args.end(), {"--sim-context-memory", std::to_string(opt_.sim_context_memory)});
    for (const auto& k : opt_.sim_kernels) args.insert(args.end(), {"--sim-kernels", k});
    if (opt_.sim_fixed_addresses) args.push_back("--sim-fixed-addresses");
    if (opt_.sim_separate_host) args.push_back("--sim-separate-host");
  }
  if (backend_ == "cuda" && !opt_.cuda_driver.empty()) args.insert(args.end(), {"--cuda-driver", opt_.cuda_driver});
  if (!opt_.peer_links) args.push_back("--no-peer-links");
  if (!opt_.worker_sandbox) args.push_back("--no-sandbox");
  if (opt_.module_cache != "none")
    args.insert(args.end(), {"--module-cache", opt_.module_cache, "--module-cache-max", std::to_string(opt_.module_cache_max)});
  return args;
}

Server::WorkerPages Server::pagesFor(const std::optional<token::Claims>& lease, double share) {
  WorkerPages pages;
  if (lease) {
    ShareState& s = shareOf(*lease);
    pages.memory = s.memory, pages.pace = s.pace;
    pages.launches = launchPageOf(lease->lease);
  } else if (share < 1) {
    pages.pace = budget::ComputePace::create();  // (no lease: each client is paced on its own)
  }
  return pages;
}

// Starts `args` with the client's socket as descriptor 3 and `fds` (descriptor, the option naming it) from
// 4 up, nothing else of ours (listener, other clients, pipes); the option and number of each are added to
// `args`. Its standard error is a pipe whose lines the server logs as its words (worker_log.h), for
// `lease`. Returns the child, or the errno of a failure (as a negative number).
pid_t Server::spawn(std::vector<std::string> args, int socket, const std::vector<std::pair<int, const char*>>& fds,
            std::vector<std::string> env, const std::string& lease) {
  int log[2];
  if (::pipe2(log, O_CLOEXEC) != 0) return -errno;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, log[1], 2);  // dup2 clears close-on-exec
  posix_spawn_file_actions_adddup2(&fa, socket, 3);
  int next = 4;  // (the pages' own descriptors are above these: shared_budget.h)
  for (auto [fd, flag] : fds) {
    posix_spawn_file_actions_adddup2(&fa, fd, next);
    args.insert(args.end(), {flag, std::to_string(next++)});
  }
  posix_spawn_file_actions_addclosefrom_np(&fa, next);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, opt_.worker_path.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(log[1]);
  if (rc != 0) {
    ::close(log[0]);
    return -rc;
  }
  WorkerLog::relay(io_, log[0], pid, lease);
  return pid;
}

void Server::spawnWorker(const std::shared_ptr<Pending>& p, const proto::HelloRequest& hello,
                 const std::optional<token::Claims>& lease) {
  const std::string lease_id = lease ? lease->lease : "";
  std::vector<std::string> args = workerOptions(hello, p->header.seq);
  const int slot = freeSlot();
  const double share = lease ? lease->fraction : opt_.client_share;
  std::optional<uid_t> uid;  // --worker-uids: the lease's user (taken first: a refusal then leaves nothing made)
  if (worker_users_) {
    uid = worker_users_->take(lease_id);
    if (!uid) return refuse(p, 2 /*CUDA_ERROR_OUT_OF_MEMORY*/, "every uid of --worker-uids " + opt_.worker_uids + " serves another lease");
    args.insert(args.end(), {"--uid", std::to_string(*uid), "--gid", std::to_string(*uid), "--max-threads",
                             std::to_string(opt_.max_threads_per_lease)});
  }
  WorkerPages pages;
  try {
    pages = pagesFor(lease, share);
  } catch (const std::exception& e) {
    if (nothingHere(lease_id)) forgetLease(lease_id);
    return refuse(p, 999, e.what());
  }
  if (pages.memory) args.insert(args.end(), {"--memory-cap", std::to_string(lease->memory)});
  auto jit = jitCacheOf(lease, uid);
  if (jit) args.insert(args.end(), {"--jit-cache", jit->string()});
  if (pages.pace) args.insert(args.end(), {"--compute-share", std::to_string(share)});
  args.insert(args.end(), {"--budget-slot", std::to_string(slot)});
  std::vector<std::pair<int, const char*>> fds;
  for (auto [page, flag] : {std::pair{pages.memory.get(), "--memory-budget-fd"},
                            std::pair{backend_ == "sim" ? sim_memory_.get() : nullptr, "--device-budget-fd"},
                            std::pair{backend_ == "sim" ? sim_busy_.get() : nullptr, "--device-busy-fd"},
                            std::pair{pages.launches.get(), "--launch-counter-fd"}})
    if (page) fds.emplace_back(page->fd(), flag);
  if (pages.pace) fds.emplace_back(pages.pace->fd(), "--compute-pace-fd");
  const budget::RecordSeal seal = budget::newRecordSeal();
  std::vector<std::string> env = workerEnvironment(environ, hello.driver_env);
  env.push_back("GPOOL_RECORD_SEAL=" + hexOf(seal.data(), seal.size()));
  pid_t pid = spawn(std::move(args), p->socket.native_handle(), fds, std::move(env), lease_id);
  if (pid < 0) {
    if (nothingHere(lease_id)) forgetLease(lease_id);
    return refuse(p, 999, std::string("cannot start gpool-worker: ") + std::strerror(-pid));
  }
  ++workers_;
  workers_by_pid_[pid] = Worker{lease_id, slot, uid.value_or(::getuid()), static_cast<int>(hello.device),
                                lease ? lease->share : 0, share, seal, jit ? jit->filename().string() : ""};
  reportServing();
  if (jit) boundJitCaches();
  spdlog::info("client {} ({}) → worker {} on device {}{}{}{}", peer(p), hello.client.empty() ? "?" : printable(hello.client), pid,
               hello.device, lease ? " for lease " + lease_id : "", uid ? ", as uid " + std::to_string(*uid) : "",
               lease && !lease->user.empty() ? " (user " + printable(lease->user) + ")" : "");
  close(p);  // the worker owns the connection now
}
}  // namespace gpool::server
