// Accepts connections, reads and checks each Hello without blocking the others, and starts one
// gpool-worker per client with the socket as its fd 3. Worker exits are reaped on SIGCHLD.
#include "listener.h"
#include "server_class.h"

namespace gpool::server {
namespace {

std::string selfDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

// Runs `cmd` in a shell and returns its exit status; `out` gets what it printed.
int capture(const std::string& cmd, std::string& out) {
  int rc = -1;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (std::fgets(buf, sizeof buf, f)) out += buf;
    rc = ::pclose(f);
  }
  return rc;
}

// `word` quoted for the shell, whatever it holds.
std::string shellQuoted(const std::string& word) {
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The worker's command line for a probe or the inventory, up to the options of each.
std::string workerCommand(const ServerOptions& o) {
  std::string cmd = shellQuoted(o.worker_path);
  if (!o.cuda_driver.empty()) cmd += " --cuda-driver " + shellQuoted(o.cuda_driver);
  return cmd;
}

// Runs `worker --probe`: the driver is initialised in that child, never in the server. `as_user`: the
// worker's --uid and --gid, with --worker-uids (the driver must be usable as the workers' users).
std::string resolveBackend(const ServerOptions& o, const std::string& as_user) {
  if (o.backend != "auto") return o.backend;
  std::string out;
  int rc = capture(workerCommand(o) + " --probe" + as_user + " 2>/dev/null", out);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (rc == 0) {
    spdlog::info("backend auto: a CUDA driver and device are present, using cuda");
    return "cuda";
  }
  // (A GPU host whose driver works for the server's user but not for the workers': the device files' mode.)
  bool device_files = std::filesystem::exists("/dev/nvidiactl");
  spdlog::info("backend auto: no usable CUDA device ({}{}), using sim — host emulation, no GPU", out.empty() ? "probe failed" : out,
               as_user.empty() || !device_files ? "" : "; probed as the first uid of --worker-uids, which needs read and write access to /dev/nvidia*");
  return "sim";
}

// The devices this host offers, as the allocator's registration lists them: asked of a worker process
// (`gpool-worker --inventory`), so the server itself still never initialises CUDA.
std::string inventory(const ServerOptions& o, const std::string& backend, const std::string& as_user) {
  std::string cmd = workerCommand(o) + " --inventory --backend " + backend + " --sim-memory " + std::to_string(o.sim_memory) + as_user;
  std::string out;
  int rc = capture(cmd, out);
  if (rc != 0 || out.empty()) throw std::runtime_error("cannot list this host's GPUs (" + cmd + " failed)");
  return out;
}

}  // namespace

int Server::run() {
  if (opt_.worker_path.empty()) opt_.worker_path = selfDir() + "/gpool-worker";
  if (::access(opt_.worker_path.c_str(), X_OK) != 0)
    throw std::runtime_error("gpool-worker not found at " + opt_.worker_path + " (use --worker PATH)");
  tcp::endpoint ep = listenEndpoint();
  prepareWorkers();
  listen(ep);
  if (!opt_.allocator.empty()) linkToAllocator(ep);
  startAudits();
  if (!opt_.metrics.empty()) metrics_ = std::make_unique<MetricsEndpoint>(opt_.metrics, [this] { return gathered(); });
  awaitSignal();
  watchChildren();
  accept();
  io_.run();
  endWorkers();
  return 0;
}

Server::tcp::endpoint Server::listenEndpoint() const {
  std::string host;
  uint16_t port = 0;
  asio::error_code aec;
  bool parsed = proto::parseHostPort(opt_.listen, host, port);
  auto address = parsed ? asio::ip::make_address(host, aec) : asio::ip::address();
  if (!parsed || aec)
    throw std::runtime_error("malformed --listen '" + opt_.listen + "': expected IP:PORT, e.g. 0.0.0.0:7420 or [::]:7420");
  return tcp::endpoint(address, port);
}

// What the workers run with and as: every descriptor the system allows, this server as their subreaper,
// their users (--worker-uids), sandbox, JIT caches, and the backend.
void Server::prepareWorkers() {
  // Each connection is a descriptor until its worker has it: take the whole allowance the system gives.
  if (rlimit r{}; ::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
  if (!adoptOrphans())  // (before any worker: what one leaves running is the server's to end, leftover_processes.h)
    spdlog::warn("cannot become the subreaper of this server's workers ({}): what a worker leaves running is not ended",
                 std::strerror(errno));
  if (!opt_.worker_uids.empty()) {
    std::string why;
    auto range = WorkerUsers::parse(opt_.worker_uids, why);
    if (!range) throw std::runtime_error(why);
    worker_users_ = std::make_unique<WorkerUsers>(*range);
    if (opt_.module_cache != "none") WorkerUsers::shareDirectory(opt_.module_cache);
  } else if (::geteuid() == 0) {
    spdlog::warn("gpool-server runs as root, and so would each worker, which runs what its client sends: give "
                 "--worker-uids FIRST-LAST to run each lease's workers as a user of its own (docs/admin.md)");
  }
  sayWhetherWorkersAreSandboxed();
  openJitCaches();
  backend_ = resolveBackend(opt_, probeUser());
  if (backend_ == "sim") {
    sim_memory_ = budget::SharedBudget::create(opt_.sim_memory);  // host memory: one budget for all
    sim_busy_ = budget::SharedBudget::create(UINT64_MAX);         // (counters of device time: no limit)
  }
}

void Server::listen(const tcp::endpoint& ep) {
  acceptor_.open(ep.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  asio::error_code ec;
  acceptor_.bind(ep, ec);
  if (ec) throw std::runtime_error("cannot listen on " + opt_.listen + ": " + ec.message());
  acceptor_.listen();
  spdlog::info("listening on {}:{} (backend {}, protocol {}.{})", ep.address().to_string(), acceptor_.local_endpoint().port(),
               backend_, proto::kVersionMajor, proto::kVersionMinor);

}

// Registers this host's GPUs with the allocator under this server's key (made when missing), and serves
// only clients whose lease token the allocator signed.
void Server::linkToAllocator(const tcp::endpoint& ep) {
  if (opt_.name.empty()) {
    char h[256] = {};
    ::gethostname(h, sizeof h - 1);
    opt_.name = h;
  }
  token_key_ = token::Ed25519Key::loadPublic(opt_.token_key);
  std::error_code ec;
  bool made = !std::filesystem::exists(opt_.server_key, ec);
  if (made) std::filesystem::create_directories(std::filesystem::path(opt_.server_key).parent_path(), ec);
  auto server_key = token::Ed25519Key::loadPrivate(opt_.server_key, true);
  if (made)
    spdlog::warn("made this server's key {}: until an admin enrolls it (gpool admin server enroll {} {}), the allocator "
                 "refuses this server", opt_.server_key, opt_.name, token::Ed25519Key::publicPath(opt_.server_key));
  std::string advertise = opt_.advertise;
  if (advertise.empty()) {
    std::string shown = ep.address().is_unspecified() ? opt_.name : ep.address().to_string();
    advertise = shown + ":" + std::to_string(acceptor_.local_endpoint().port());
  }
  auto gpus = nlohmann::json::parse(inventory(opt_, backend_, probeUser()));
  for (const auto& gpu : gpus) gpu_uuids_.push_back(gpu.at("uuid").get<std::string>());
  nlohmann::json reg = {{"name", opt_.name}, {"address", advertise}, {"gpus", gpus}};
  link_ = std::make_unique<AllocatorLink>(
      opt_.allocator, opt_.allocator_ca, server_key, opt_.name, reg.dump(), [this](const std::string& lease) { asio::post(io_, [this, lease] { revoke(lease); }); },
      [this](std::vector<std::string> live, uint64_t request) {
        asio::post(io_, [this, live = std::move(live), request] {
          for (const std::string& lease : gate_.update(live, request)) revoke(lease);
        });
      });
  spdlog::info("leases from {} required: clients need a token naming server '{}' (clients connect to {})",
               opt_.allocator, opt_.name, advertise);
}

// The first SIGTERM/SIGINT stops accepting and lets running workers finish with their clients (a worker
// ends with its server, so the server stays until the last one has); a second one ends them now.
void Server::awaitSignal() {
  signals_.async_wait([this](const asio::error_code& ec, int sig) {
    if (ec) return;
    if (draining_ || workers_ == 0) {
      spdlog::info("signal {}: shutting down{}", sig, workers_ ? "; running workers are stopped" : "");
      return io_.stop();
    }
    draining_ = true;
    asio::error_code ignored;
    acceptor_.close(ignored);
    spdlog::info("signal {}: no new clients; {} worker(s) finish with their clients (signal again to stop them now)", sig, workers_);
    awaitSignal();
  });
}

// Accepts clients until shutdown. When accepting fails (at the descriptor limit, say), it waits before
// trying again, longer each time up to a second, and logs once per run of failures instead of spinning.
void Server::accept() {
  if (draining_) return;
  auto p = std::make_shared<Pending>(io_);
  acceptor_.async_accept(p->socket, [this, p](const asio::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      accept_backoff_ = std::chrono::milliseconds(0);
      if (admitted(*p)) handshake(p);
      return accept();
    }
    if (accept_backoff_.count() == 0)
      spdlog::warn("accept failed: {}; retrying with back-off until it succeeds (raise the open-file limit, "
                   "ulimit -n, if this is EMFILE)", ec.message());
    accept_backoff_ = std::min<std::chrono::milliseconds>(std::max(accept_backoff_ * 2, std::chrono::milliseconds(10)),
                                                          std::chrono::seconds(1));
    accept_retry_.expires_after(accept_backoff_);
    accept_retry_.async_wait([this](const asio::error_code& e) {
      if (!e) accept();
    });
  });
}

// Whether a connection just accepted may start its handshake: its address has fewer than
// --max-pending-per-address in progress. Otherwise it is closed at once, so that a host opening
// connections that never say hello holds its own share of the server's descriptors, not all of them.
bool Server::admitted(Pending& p) {
  asio::error_code ec;
  auto ep = p.socket.remote_endpoint(ec);
  if (ec) return p.socket.close(ec), false;  // it went away already
  p.address = PeerConnections::peerOf(ep.address().to_string());
  if (pending_.admit(p.address)) return p.counted = &pending_, true;
  ++refused_[static_cast<size_t>(Refusal::kAddress)];
  if (pending_.warnNow())
    spdlog::warn("closed a connection from {}: it has {} connections in their handshake already (--max-pending-per-address); "
                 "{} closed so far", p.address, pending_.perPeer(), pending_.refused.load());
  p.socket.close(ec);
  return false;
}

std::string Server::peer(const std::shared_ptr<Pending>& p) {
  asio::error_code ec;
  auto ep = p->socket.remote_endpoint(ec);
  return ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
}

void Server::handshake(std::shared_ptr<Pending> p) {
  p->timer.expires_after(std::chrono::milliseconds(opt_.handshake_timeout_ms));
  p->timer.async_wait([p](const asio::error_code& ec) {
    if (!ec) {
      spdlog::warn("{} sent no handshake in time; closing", peer(p));
      asio::error_code ignored;
      p->socket.close(ignored);
    }
  });
  // A connection that ends before its Hello is released at once (its timer would hold it until the timeout).
  asio::async_read(p->socket, asio::buffer(&p->header, sizeof p->header), [this, p](const asio::error_code& ec, size_t) {
    if (ec) return (void)p->timer.cancel();
    if (p->header.msg != proto::kMsgHello || p->header.length > 64 * 1024 || (p->header.flags & proto::kIsReply)) {
      spdlog::warn("{} did not start with a valid Hello (message {:#06x}, {} bytes); closing", peer(p), p->header.msg, p->header.length);
      ++refused_[static_cast<size_t>(Refusal::kRequest)];
      return close(p);
    }
    p->payload.resize(p->header.length);
    asio::async_read(p->socket, asio::buffer(p->payload), [this, p](const asio::error_code& ec2, size_t) {
      if (ec2) return (void)p->timer.cancel();
      p->timer.cancel();
      onHello(p);
    });
  });
}

void Server::close(const std::shared_ptr<Pending>& p) {
  asio::error_code ignored;
  p->timer.cancel();
  p->socket.close(ignored);
}

// Why a refusal's status turned a client away, for /metrics.
Refusal Server::refusalOf(int32_t status) {
  switch (status) {
    case 2: return Refusal::kCapacity;    // CUDA_ERROR_OUT_OF_MEMORY: no room
    case 100: return Refusal::kLease;     // CUDA_ERROR_NO_DEVICE: no valid lease
    case 999: return Refusal::kInternal;  // the worker could not start
    default: return Refusal::kRequest;
  }
}

void Server::refuse(const std::shared_ptr<Pending>& p, int32_t status, const std::string& why) {
  spdlog::warn("refusing {}: {}", peer(p), why);
  ++refused_[static_cast<size_t>(refusalOf(status))];
  proto::HelloReply r;
  r.status = status;
  r.error = why;
  auto payload = proto::encode(r);
  proto::FrameHeader h{static_cast<uint32_t>(payload.size()), proto::kMsgHello, proto::kIsReply, p->header.seq};
  asio::error_code ec;
  std::array<asio::const_buffer, 2> bufs{asio::buffer(&h, sizeof h), asio::buffer(payload)};
  asio::write(p->socket, bufs, ec);  // small; a closed peer just fails
  close(p);
}

void Server::onHello(const std::shared_ptr<Pending>& p) {
  auto hello = proto::decodeHelloRequest(p->payload);
  if (!hello || hello->magic != proto::kMagic) return refuse(p, 1, "malformed Hello");
  if (hello->major != proto::kVersionMajor)
    return refuse(p, 1, "protocol version " + std::to_string(hello->major) + "." + std::to_string(hello->minor) +
                            " is not supported by this server (" + std::to_string(proto::kVersionMajor) + "." +
                            std::to_string(proto::kVersionMinor) + "); install matching gpool versions");
  for (const std::string& e : hello->driver_env)
    if (!proto::validDriverSetting(e))
      return refuse(p, 1, "driver setting '" + printable(e.substr(0, 64)) + "' is not one a client may give its worker " +
                              "(CUDA_DEVICE_MAX_CONNECTIONS=1..32, CUDA_LAUNCH_BLOCKING, CUDA_MODULE_LOADING, CUDA_FORCE_PTX_JIT, "
                              "CUDA_DISABLE_PTX_JIT)");
  if (std::string why = noRoomFor(""); !why.empty()) return refuse(p, 2 /*CUDA_ERROR_OUT_OF_MEMORY*/, why);
  std::optional<token::Claims> lease;
  if (link_) {
    std::string why;
    int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (hello->token.empty())
      return refuse(p, 100 /*CUDA_ERROR_NO_DEVICE*/, "this server only serves leases from " + opt_.allocator +
                                                         ": run the program with `gpool run`, or set GPOOL_ALLOCATOR");
    lease = token::check(hello->token, *token_key_, opt_.name, static_cast<int>(hello->device), now, why);
    if (!lease) return refuse(p, 100 /*CUDA_ERROR_NO_DEVICE*/, "lease token refused: " + why);
    if (revoked_.count(lease->lease)) return refuse(p, 100, "lease " + lease->lease + " has ended");
    return admitLease(p, *hello, *lease);
  }
  spawnWorker(p, *hello, lease);
}

// The server's workers serving `lease` ("": clients without a lease).
size_t Server::workersOf(const std::string& lease) const {
  return std::count_if(workers_by_pid_.begin(), workers_by_pid_.end(), [&](const auto& w) { return w.second.lease == lease; });
}

// Why one more client (of `lease`, when named) cannot be served now, or "" when it can: the server's
// slots, and each lease's share of them so that one token cannot take the slots of other leases.
std::string Server::noRoomFor(const std::string& lease) const {
  if (workers_ >= opt_.max_clients) return "server is at --max-clients " + std::to_string(opt_.max_clients);
  if (lease.empty()) return "";
  size_t held = workersOf(lease);
  if (held >= opt_.max_clients_per_lease)
    return "lease " + lease + " already has " + std::to_string(held) + " connections (--max-clients-per-lease)";
  return "";
}

void Server::admitLease(const std::shared_ptr<Pending>& p, const proto::HelloRequest& hello, const token::Claims& lease) {
  uint64_t ticket = gate_.admit(lease.lease, link_->refresh(), [this, p, hello, lease](bool live, const std::string& why) {
    p->timer.cancel();
    if (!live) return refuse(p, 100 /*CUDA_ERROR_NO_DEVICE*/, why);
    if (std::string full = noRoomFor(lease.lease); !full.empty()) return refuse(p, 2 /*CUDA_ERROR_OUT_OF_MEMORY*/, full);
    if (gone(p)) {  // it left while its lease was being confirmed: no worker for nobody
      spdlog::info("client {} left before its lease {} was confirmed: no worker", peer(p), lease.lease);
      return close(p);
    }
    spawnWorker(p, hello, lease);
  });
  if (ticket == 0) return;  // answered already
  spdlog::info("client {} waits for the allocator to confirm lease {}", peer(p), lease.lease);
  p->timer.expires_after(std::chrono::milliseconds(kLeaseConfirmMs));
  p->timer.async_wait([this, ticket](const asio::error_code& ec) {
    if (!ec) gate_.expire(ticket);
  });
}

// The allocator ended a lease (expired, or the server it ran on was declared down): its workers stop.
void Server::revoke(const std::string& lease) {
  revoked_.insert(lease);
  for (const auto& [pid, w] : workers_by_pid_)
    if (w.lease == lease) {
      spdlog::info("lease {} ended at the allocator; stopping its worker {}", lease, pid);
      ::kill(pid, SIGTERM);
    }
}

// Whether a pending client closed its connection (without reading or waiting).
bool Server::gone(const std::shared_ptr<Pending>& p) {
  char byte;
  return ::recv(p->socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// Tells the allocator which leases have workers here (it holds an ended lease's share until none has).
void Server::reportServing() {
  if (!link_) return;
  auto sources = leaseSources();
  std::vector<std::string> leases;
  for (const auto& [lease, from] : sources) leases.push_back(lease);
  link_->leaseSources(std::move(sources));
  link_->serving(std::move(leases));
}

// Where the figures of each lease with workers here are read: its workers' slots, what its ended ones
// launched, its shares' memory budgets and compute paces.
std::map<std::string, AllocatorLink::LeaseSources> Server::leaseSources() const {
  std::map<std::string, AllocatorLink::LeaseSources> sources;
  for (const auto& [pid, w] : workers_by_pid_)
    if (!w.lease.empty()) sources[w.lease].slots.push_back(w.slot);
  for (const std::string& lease : held_exports_.leases()) sources[lease];  // (served here still: held_exports.h)
  for (auto& [lease, from] : sources) {
    from.ended = ended_launches_.count(lease) ? ended_launches_.at(lease) : 0;
    if (auto page = launch_pages_.find(lease); page != launch_pages_.end()) from.launches = page->second;
  }
  for (const auto& [key, share] : shares_) {
    auto from = sources.find(key.first);
    if (from == sources.end()) continue;
    if (share.memory) from->second.memory.push_back(share.memory);
    if (share.pace) from->second.paces.push_back(share.pace);
  }
  return sources;
}

// --- What each lease uses of the GPU as the driver counts it, read every --memory-audit (use_audits.h) ---
void Server::sayWhetherWorkersAreSandboxed() const {
  std::string why;
  if (!opt_.worker_sandbox)
    spdlog::warn("--no-worker-sandbox: a worker taken over by its client reaches whatever its user may (docs/security.md)");
  else if (int abi = landlockAbi(why); abi == 0)
    spdlog::warn("workers are not sandboxed: {}; a worker taken over by its client reaches whatever its user may "
                 "(docs/security.md)", why);
  else
    spdlog::info("workers are sandboxed (Landlock ABI {}{})", abi, abi < 6 ? "; before ABI 6 (Linux 6.12) they can still signal each other" : "");
}

// Each lease's user's JIT cache (jit_caches.h); with --worker-uids, lent to one lease's uid at a time. None
// for a server without leases; none, with a warning, where the directory cannot be made (workers then
// compile PTX at each load).
void Server::openJitCaches() {
  if (std::getenv("CUDA_CACHE_PATH"))
    spdlog::warn("CUDA_CACHE_PATH in gpool-server's environment is not given to its workers: each lease's user has a "
                 "JIT cache of their own under --jit-cache (docs/admin.md)");
  if (opt_.jit_cache == "none" || opt_.allocator.empty()) {
    spdlog::info("workers keep no JIT cache ({}): they compile PTX at each load",
                 opt_.jit_cache == "none" ? "--jit-cache none" : "clients without a lease get none");
    return;
  }
  try {
    jit_caches_ = std::make_unique<JitCaches>(opt_.jit_cache, opt_.jit_cache_max, worker_users_ != nullptr);
    if (worker_users_)  // (lent by a server before this one, whose uids were cleared as this one started)
      jit_caches_->giveBack(worker_users_->first(), worker_users_->last());
    spdlog::info("JIT caches: one for each lease's user{}, in {} ({} MiB at most together)",
                 worker_users_ ? ", lent to one of their leases' uids at a time" : "", opt_.jit_cache, opt_.jit_cache_max >> 20);
    boundJitCaches();
  } catch (const std::exception& e) {
    spdlog::warn("{}; workers compile PTX at each load meanwhile", e.what());
  }
}

// Holds the JIT caches to --jit-cache-max, at most once a minute (it reads every cache's size), but at
// start; the caches of users whose workers run stay.
void Server::boundJitCaches() {
  auto now = std::chrono::steady_clock::now();
  if (jit_caches_bounded_ && now - *jit_caches_bounded_ < std::chrono::minutes(1)) return;
  jit_caches_bounded_ = now;
  std::set<std::string> in_use;
  for (const auto& [pid, w] : workers_by_pid_)
    if (!w.jit_cache.empty()) in_use.insert(w.jit_cache);
  JitCaches::Removed removed = jit_caches_->bound(in_use);
  if (!removed.users.empty())
    spdlog::info("JIT caches past --jit-cache-max ({} MiB): removed {} MiB, the caches of {} user(s) unused longest: {}",
                 opt_.jit_cache_max >> 20, removed.bytes >> 20, removed.users.size(), fmt::join(removed.users, ", "));
}

// The JIT cache of `lease`'s user, lent to `uid` with --worker-uids, or nullopt: none (above), a token that
// names no user, a cache lent to another of the user's leases, or a directory that cannot be made (said).
std::optional<std::filesystem::path> Server::jitCacheOf(const std::optional<token::Claims>& lease, std::optional<uid_t> uid) {
  if (!jit_caches_ || !lease || lease->user.empty()) return std::nullopt;
  std::string why;
  auto dir = uid ? jit_caches_->lend(lease->user, *uid, why) : jit_caches_->of(lease->user, why);
  if (!dir) spdlog::warn("{}: the workers of lease {} compile PTX at each load", why, lease->lease);
  return dir;
}

void Server::startAudits() {
  UseAudits::Settings s;
  s.memory = opt_.memory_audit_ms > 0;
  s.interval_ms = s.memory ? opt_.memory_audit_ms : 1000;
  s.per_worker = opt_.context_memory >= 0 ? static_cast<uint64_t>(opt_.context_memory)
                 : backend_ == "sim"      ? opt_.sim_context_memory
                                          : 2ull << 30;
  s.compute_limit_ns = opt_.compute_audit_ns;
  s.gpus = gpu_uuids_;
  audits_ = UseAudits::start(io_, s, {sim_memory_, sim_busy_}, [this] { return served(); },
                             [this] { endLeftovers(); });  // (a process a worker started apart may use the GPU unseen)
}

// The workers here, and each lease's memory cap in all (0 when a share has none).
UseAudits::Served Server::served() const {
  UseAudits::Served now;
  now.by_uid = worker_users_ != nullptr;
  for (const auto& [pid, w] : workers_by_pid_)
    now.workers.push_back({pid, w.lease, w.slot, w.uid, {w.share, w.fraction, w.device}});
  std::set<std::string> uncapped;
  for (const auto& [key, s] : shares_) {
    if (s.memory) now.caps[key.first] += s.memory->limit();
    else uncapped.insert(key.first);
  }
  for (const std::string& lease : uncapped) now.caps[lease] = 0;
  return now;
}

// What /metrics shows, gathered on the server's thread; nullopt when it does not answer within 2 s.
std::optional<ServerFigures> Server::gathered() {
  auto answer = std::make_shared<std::promise<ServerFigures>>();
  std::future<ServerFigures> figures = answer->get_future();
  asio::post(io_, [this, answer] { answer->set_value(figuresNow()); });
  if (figures.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return std::nullopt;
  return figures.get();
}

ServerFigures Server::figuresNow() const {
  ServerFigures f{backend_, workers_, opt_.max_clients, draining_, refused_, 0, 0, {}, {}};
  if (worker_users_) f.worker_uids = worker_users_->size(), f.worker_uids_in_use = worker_users_->inUse();
  if (audits_) f.memory_overruns = audits_->memoryOverruns(), f.compute_overruns = audits_->computeOverruns();
  auto ahead = audits_ ? audits_->computeAhead() : std::map<std::string, int64_t>{};
  for (const auto& [lease, from] : leaseSources()) {
    f.leases.push_back({lease, static_cast<unsigned>(from.slots.size()), from.launched(), std::nullopt});
    if (auto a = ahead.find(lease); a != ahead.end()) f.leases.back().ahead_ns = a->second;
  }
  for (const auto& [key, s] : shares_) {
    ShareFigures sf{key.first, key.second, s.device, s.fraction};
    if (s.memory) sf.capped = true, sf.memory_used = s.memory->used(), sf.memory_limit = s.memory->limit();
    if (s.pace) sf.paced = true, sf.busy_ns = s.pace->busyNs(), sf.waited_ns = s.pace->waitedNs();
    f.shares.push_back(sf);
  }
  return f;
}

// The worker's --uid and --gid for a probe or the inventory: the first of --worker-uids ("" without).
std::string Server::probeUser() const {
  if (!worker_users_) return "";
  std::string uid = std::to_string(worker_users_->first());
  return " --uid " + uid + " --gid " + uid;
}

namespace {
// `name` in the cache directory of this server's user: $XDG_CACHE_HOME/gpool, ~/.cache/gpool, else /var/tmp.
std::string userCacheDir(const std::string& name) {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/gpool/" + name;
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/gpool/" + name;
  return "/var/tmp/gpool-" + name + "-" + std::to_string(::getuid());
}
}  // namespace

std::string defaultModuleCacheDir() { return userCacheDir("modules"); }
std::string defaultJitCacheDir() { return userCacheDir("jit"); }

std::string defaultServerKeyPath() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) return std::string(xdg) + "/gpool/server-key.pem";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.config/gpool/server-key.pem";
  return "/etc/gpool/server-key.pem";
}

int runServer(ServerOptions options) {
  Server s(std::move(options));
  return s.run();
}

}  // namespace gpool::server
