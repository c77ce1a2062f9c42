// Accepts connections, reads and checks each Hello without blocking the others, and starts one
// gpool-worker per client with the socket as its fd 3. Worker exits are reaped on SIGCHLD.
#include "listener.h"

#include <algorithm>
#include <climits>
#include <chrono>
#include <asio.hpp>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>

#include "allocator_link.h"
#include "compute_pace.h"
#include "held_exports.h"
#include "jit_caches.h"
#include "leftover_processes.h"
#include "use_audits.h"
#include "shared_budget.h"
#include "lease_gate.h"
#include "server_metrics.h"
#include "worker_log.h"
#include "worker_environment.h"
#include "worker_users.h"
#include "gpool/protocol/driver_settings.h"
#include "gpool/protocol/frame_io.h"
#include "lease_token.h"
#include "gpool/hex.h"
#include "gpool/landlock_abi.h"
#include "gpool/peer_connections.h"
#include "gpool/printable.h"
#include "gpool/protocol/handshake.h"

extern char** environ;

namespace gpool::server {
namespace {

using asio::ip::tcp;

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

// Runs `worker --probe`: the driver is initialised in that child, never in the server. `as_user`: the
// worker's --uid and --gid, with --worker-uids (the driver must be usable as the workers' users).
std::string resolveBackend(const ServerOptions& o, const std::string& as_user) {
  if (o.backend != "auto") return o.backend;
  std::string out;
  int rc = capture("'" + o.worker_path + "' --probe" + as_user + " 2>/dev/null", out);
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
  std::string cmd = "'" + o.worker_path + "' --inventory --backend " + backend + " --sim-memory " + std::to_string(o.sim_memory) + as_user;
  std::string out;
  int rc = capture(cmd, out);
  if (rc != 0 || out.empty()) throw std::runtime_error("cannot list this host's GPUs (" + cmd + " failed)");
  return out;
}

class Server {
 public:
  Server(ServerOptions o) : opt_(std::move(o)), acceptor_(io_), signals_(io_, SIGINT, SIGTERM), children_(io_, SIGCHLD) {}

  int run() {
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
    return 0;
  }

 private:
  tcp::endpoint listenEndpoint() const {
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
  void prepareWorkers() {
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

  void listen(const tcp::endpoint& ep) {
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
  void linkToAllocator(const tcp::endpoint& ep) {
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

 private:
  // A connection until its handshake is done (its worker has it) or refused. It counts against its
  // address's share of handshakes in progress (pending_) until it goes.
  struct Pending {
    tcp::socket socket;
    asio::steady_timer timer;
    proto::FrameHeader header{};
    std::vector<uint8_t> payload;
    std::string address;
    PeerConnections* counted = nullptr;  // where `address` was counted
    explicit Pending(asio::io_context& io) : socket(io), timer(io) {}
    ~Pending() {
      if (counted) counted->release(address);
    }
  };

  // The first SIGTERM/SIGINT stops accepting and lets running workers finish with their clients (a worker
  // ends with its server, so the server stays until the last one has); a second one ends them now.
  void awaitSignal() {
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
  void accept() {
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
  bool admitted(Pending& p) {
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

  static std::string peer(const std::shared_ptr<Pending>& p) {
    asio::error_code ec;
    auto ep = p->socket.remote_endpoint(ec);
    return ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void handshake(std::shared_ptr<Pending> p) {
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

  void close(const std::shared_ptr<Pending>& p) {
    asio::error_code ignored;
    p->timer.cancel();
    p->socket.close(ignored);
  }

  // Why a refusal's status turned a client away, for /metrics.
  static Refusal refusalOf(int32_t status) {
    switch (status) {
      case 2: return Refusal::kCapacity;    // CUDA_ERROR_OUT_OF_MEMORY: no room
      case 100: return Refusal::kLease;     // CUDA_ERROR_NO_DEVICE: no valid lease
      case 999: return Refusal::kInternal;  // the worker could not start
      default: return Refusal::kRequest;
    }
  }

  void refuse(const std::shared_ptr<Pending>& p, int32_t status, const std::string& why) {
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

  void onHello(const std::shared_ptr<Pending>& p) {
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
  size_t workersOf(const std::string& lease) const {
    return std::count_if(workers_by_pid_.begin(), workers_by_pid_.end(), [&](const auto& w) { return w.second.lease == lease; });
  }
  // Why one more client (of `lease`, when named) cannot be served now, or "" when it can: the server's
  // slots, and each lease's share of them so that one token cannot take the slots of other leases.
  std::string noRoomFor(const std::string& lease) const {
    if (workers_ >= opt_.max_clients) return "server is at --max-clients " + std::to_string(opt_.max_clients);
    if (lease.empty()) return "";
    size_t held = workersOf(lease);
    if (held >= opt_.max_clients_per_lease)
      return "lease " + lease + " already has " + std::to_string(held) + " connections (--max-clients-per-lease)";
    return "";
  }

  // A valid token is served only while the allocator calls its lease live here (lease_gate.h); a client
  // whose lease the last answer did not list waits for the next one, at most kLeaseConfirmMs.
  static constexpr int kLeaseConfirmMs = 10000;
  void admitLease(const std::shared_ptr<Pending>& p, const proto::HelloRequest& hello, const token::Claims& lease) {
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
  void revoke(const std::string& lease) {
    revoked_.insert(lease);
    for (const auto& [pid, w] : workers_by_pid_)
      if (w.lease == lease) {
        spdlog::info("lease {} ended at the allocator; stopping its worker {}", lease, pid);
        ::kill(pid, SIGTERM);
      }
  }

  // Whether a pending client closed its connection (without reading or waiting).
  static bool gone(const std::shared_ptr<Pending>& p) {
    char byte;
    return ::recv(p->socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }

  // Tells the allocator which leases have workers here (it holds an ended lease's share until none has).
  void reportServing() {
    if (!link_) return;
    auto sources = leaseSources();
    std::vector<std::string> leases;
    for (const auto& [lease, from] : sources) leases.push_back(lease);
    link_->leaseSources(std::move(sources));
    link_->serving(std::move(leases));
  }

  // Where the figures of each lease with workers here are read: its workers' slots, what its ended ones
  // launched, its shares' memory budgets and compute paces.
  std::map<std::string, AllocatorLink::LeaseSources> leaseSources() const {
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

  // The lowest slot no running worker holds, nor an ended one whose exported memory is still held (there are
  // at most --max-clients <= kSlots workers; held slots beyond that wait for their importers).
  int freeSlot() const {
    std::set<int> taken;
    for (const auto& [pid, w] : workers_by_pid_) taken.insert(w.slot);
    int slot = 0;
    while (taken.count(slot) || held_exports_.holdsSlot(slot)) ++slot;
    return slot;
  }

  // One share of a lease's memory and compute, across its workers here. A lease's shares are numbered in
  // its tokens; two of them on one GPU are two devices to the program, each with its own memory and time.
  using LeaseShare = std::pair<std::string, int>;  // (lease, share)
  struct ShareState {
    int device = 0;
    double fraction = 1;
    std::shared_ptr<budget::SharedBudget> memory;  // its cap, when it has one
    std::shared_ptr<budget::ComputePace> pace;     // below a whole GPU
  };
  // The share's state, made at its first worker: throws std::runtime_error when a page cannot be made.
  ShareState& shareOf(const token::Claims& lease) {
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
  std::shared_ptr<budget::SharedBudget> launchPageOf(const std::string& lease) {
    auto& page = launch_pages_[lease];
    if (!page) page = budget::SharedBudget::create(UINT64_MAX);  // (counters: no limit)
    return page;
  }
  // The lease's last worker here ended.
  void forgetShares(const std::string& lease) {
    std::erase_if(shares_, [&](const auto& s) { return s.first.first == lease; });
  }

  // --- What each lease uses of the GPU as the driver counts it, read every --memory-audit (use_audits.h) ---
  void sayWhetherWorkersAreSandboxed() const {
    std::string why;
    if (!opt_.worker_sandbox)
      spdlog::warn("--no-worker-sandbox: a worker taken over by its client reaches whatever its user may (docs/security.md)");
    else if (int abi = landlockAbi(why); abi == 0)
      spdlog::warn("workers are not sandboxed: {}; a worker taken over by its client reaches whatever its user may "
                   "(docs/security.md)", why);
    else
      spdlog::info("workers are sandboxed (Landlock ABI {}{})", abi, abi < 6 ? "; before ABI 6 (Linux 6.12) they can still signal each other" : "");
  }

  // Each lease's user's JIT cache (jit_caches.h). None with --worker-uids, whose uids serve a lease each, and
  // so a user's leases several at once; none for a server without leases; none, with a warning, where the
  // directory cannot be made (workers then compile PTX at each load).
  void openJitCaches() {
    if (std::getenv("CUDA_CACHE_PATH"))
      spdlog::warn("CUDA_CACHE_PATH in gpool-server's environment is not given to its workers: each lease's user has a "
                   "JIT cache of their own under --jit-cache (docs/admin.md)");
    if (opt_.jit_cache == "none" || opt_.allocator.empty() || worker_users_) {
      spdlog::info("workers keep no JIT cache ({}): they compile PTX at each load",
                   opt_.jit_cache == "none" ? "--jit-cache none"
                   : worker_users_          ? "not with --worker-uids"
                                            : "clients without a lease get none");
      return;
    }
    try {
      jit_caches_ = std::make_unique<JitCaches>(opt_.jit_cache, opt_.jit_cache_max);
      spdlog::info("JIT caches: one for each lease's user, in {} ({} MiB at most together)", opt_.jit_cache, opt_.jit_cache_max >> 20);
      boundJitCaches();
    } catch (const std::exception& e) {
      spdlog::warn("{}; workers compile PTX at each load meanwhile", e.what());
    }
  }
  // Holds the JIT caches to --jit-cache-max, at most once a minute (it reads every cache's size), but at
  // start; the caches of users whose workers run stay.
  void boundJitCaches() {
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
  // The JIT cache of `lease`'s user, or nullopt: none (above), a token that names no user, or a directory that
  // cannot be made (said).
  std::optional<std::filesystem::path> jitCacheOf(const std::optional<token::Claims>& lease) const {
    if (!jit_caches_ || !lease || lease->user.empty()) return std::nullopt;
    std::string why;
    auto dir = jit_caches_->of(lease->user, why);
    if (!dir) spdlog::warn("{}: the workers of lease {} compile PTX at each load", why, lease->lease);
    return dir;
  }

  void startAudits() {
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
  UseAudits::Served served() const {
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
  std::optional<ServerFigures> gathered() {
    auto answer = std::make_shared<std::promise<ServerFigures>>();
    std::future<ServerFigures> figures = answer->get_future();
    asio::post(io_, [this, answer] { answer->set_value(figuresNow()); });
    if (figures.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return std::nullopt;
    return figures.get();
  }
  ServerFigures figuresNow() const {
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

  // What every worker of this server is told: its backend, the sim's settings, peer links, the module cache.
  std::vector<std::string> workerOptions(const proto::HelloRequest& hello, uint64_t hello_seq) const {
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
    if (!opt_.peer_links) args.push_back("--no-peer-links");
    if (!opt_.worker_sandbox) args.push_back("--no-sandbox");
    if (opt_.module_cache != "none")
      args.insert(args.end(), {"--module-cache", opt_.module_cache, "--module-cache-max", std::to_string(opt_.module_cache_max)});
    return args;
  }

  // The pages a worker shares with the other workers of its lease (or, for a client without a lease, has to
  // itself), each handed to it as a descriptor. Throws std::runtime_error when one cannot be made.
  struct WorkerPages {
    std::shared_ptr<budget::SharedBudget> memory;    // the share's cap, held across all the lease's workers using it
    std::shared_ptr<budget::ComputePace> pace;       // its compute share, paced across them likewise
    std::shared_ptr<budget::SharedBudget> launches;  // the lease's launch counters (a client without a lease: none)
  };
  WorkerPages pagesFor(const std::optional<token::Claims>& lease, double share) {
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
  pid_t spawn(std::vector<std::string> args, int socket, const std::vector<std::pair<int, const char*>>& fds,
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

  void spawnWorker(const std::shared_ptr<Pending>& p, const proto::HelloRequest& hello,
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
    auto jit = jitCacheOf(lease);
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

  void watchChildren() {
    children_.async_wait([this](const asio::error_code& ec, int) {
      if (ec) return;
      int status = 0;
      pid_t pid;
      while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
        if (!workers_by_pid_.count(pid)) {  // (a process a worker left, now the server's child: leftover_processes.h)
          ended_leftovers_.erase(pid);
          continue;
        }
        workerEnded(pid);
        if (WIFSIGNALED(status))
          spdlog::warn("worker {} died with signal {}", pid, WTERMSIG(status));
        else
          spdlog::debug("worker {} exited with {}", pid, WEXITSTATUS(status));
      }
      endLeftovers();
      if (draining_ && workers_ == 0) {
        spdlog::info("the last worker finished; shutting down");
        return io_.stop();
      }
      watchChildren();
    });
  }

  // Kills the server's children that are not workers: processes workers left running (leftover_processes.h).
  void endLeftovers() {
    for (pid_t pid : leftovers([this](pid_t p) { return workers_by_pid_.count(p) > 0; })) {
      if (!ended_leftovers_.insert(pid).second) continue;  // (killed already; not reaped yet)
      spdlog::warn("process {} ({}), which a worker left running, is killed: gpool-server starts nothing but workers",
                   pid, commandOf(pid));
      ::kill(pid, SIGKILL);
    }
  }

  // A worker ended: the driver freed its memory, so its slots are free again, but for what other processes
  // still hold of the memory it exported, which stays charged to its lease and keeps the lease served here
  // until they let go (held_exports.h).
  void workerEnded(pid_t pid) {
    if (workers_ > 0) --workers_;
    Worker w{"", -1, ::getuid()};
    if (auto it = workers_by_pid_.find(pid); it != workers_by_pid_.end()) w = std::move(it->second), workers_by_pid_.erase(it);
    const std::string& lease = w.lease;
    const int slot = w.slot;
    const uid_t uid = w.uid;
    uint64_t held = slot >= 0 ? held_exports_.adopt({pid, lease, slot, uid, w.seal}) : 0;
    forEachBudget(lease, [&](budget::SharedBudget& b) { b.reclaimAllBut(slot, held); });
    if (sim_busy_ && slot >= 0) sim_busy_->reclaim(slot);  // (the next worker in the slot counts from 0)
    if (held) {
      spdlog::info("worker {} ended while other processes hold {} bytes of memory it exported; {} stays charged for them "
                   "until they let go", pid, held, lease.empty() ? "its slot" : "lease " + lease);
      watchHeldExports();
    }
    if (lease.empty()) return leaveIfDone(lease);
    if (auto page = launch_pages_.find(lease); page != launch_pages_.end() && slot >= 0) {
      ended_launches_[lease] += page->second->heldBy(slot);
      page->second->reclaim(slot);  // (counted: the slot is free for the lease's next worker)
    }
    leaveIfDone(lease);
    reportServing();
  }

  // The budgets a worker of `lease` counts in, each in the worker's slot: the lease's shares' memory caps
  // and, on sim, the device's memory.
  template <typename Each>
  void forEachBudget(const std::string& lease, Each each) {
    if (sim_memory_) each(*sim_memory_);
    for (auto s = shares_.lower_bound({lease, INT_MIN}); !lease.empty() && s != shares_.end() && s->first.first == lease; ++s)
      if (s->second.memory) each(*s->second.memory);
  }

  // Whether `lease` ("": clients without one) has neither a worker here nor anything held.
  bool nothingHere(const std::string& lease) const { return workersOf(lease) == 0 && !held_exports_.holdsFor(lease); }
  // What the server keeps for a lease with nothing here: its shares and pages, its launch count, and with
  // --worker-uids its user (whose processes are killed, and the uid freed for another lease: worker_users.h).
  void forgetLease(const std::string& lease) {
    forgetShares(lease);
    ended_launches_.erase(lease);
    launch_pages_.erase(lease);
    if (worker_users_) worker_users_->release(lease);
  }
  // Once the lease has no worker here and nothing of it is held, its share is free at the allocator.
  void leaveIfDone(const std::string& lease) {
    if (!nothingHere(lease)) return;
    forgetLease(lease);
    if (link_ && !lease.empty()) link_->released(lease);
  }
  // The worker's --uid and --gid for a probe or the inventory: the first of --worker-uids ("" without).
  std::string probeUser() const {
    if (!worker_users_) return "";
    std::string uid = std::to_string(worker_users_->first());
    return " --uid " + uid + " --gid " + uid;
  }

  // Looks, while other processes hold memory of ended workers, every kHeldPollMs for what they let go.
  static constexpr int kHeldPollMs = 200;
  void watchHeldExports() {
    if (watching_held_) return;
    watching_held_ = true;
    held_poll_.expires_after(std::chrono::milliseconds(kHeldPollMs));
    held_poll_.async_wait([this](const asio::error_code& ec) {
      watching_held_ = false;
      if (ec) return;
      settleHeldExports();
      if (!held_exports_.empty()) watchHeldExports();
    });
  }
  void settleHeldExports() {
    auto done = held_exports_.settle([this](const HeldExports::Ended& e, uint64_t bytes) {
      forEachBudget(e.lease, [&](budget::SharedBudget& b) { b.release(e.slot, bytes); });
    });
    for (const HeldExports::Ended& e : done) {
      forEachBudget(e.lease, [&](budget::SharedBudget& b) { b.reclaim(e.slot); });
      spdlog::info("the other processes let go of the memory worker {} exported{}", e.worker,
                   e.lease.empty() ? "" : "; lease " + e.lease + " no longer pays for it");
      leaveIfDone(e.lease);
    }
    if (!done.empty()) reportServing();
  }

  ServerOptions opt_;
  // Handshakes in progress per address (before io_: io_'s handlers hold Pendings that release here).
  // A host never has more clients served at once than --max-clients, so by default it may start as many.
  PeerConnections pending_{opt_.max_pending_per_address ? opt_.max_pending_per_address : opt_.max_clients};
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::signal_set signals_;
  asio::signal_set children_;
  std::string backend_;
  unsigned workers_ = 0;
  bool draining_ = false;  // a first shutdown signal came: no new clients, the server leaves with its last worker
  asio::steady_timer accept_retry_{io_};
  std::chrono::milliseconds accept_backoff_{0};
  std::optional<token::Ed25519Key> token_key_;  // verifies lease tokens (with --allocator)
  std::unique_ptr<AllocatorLink> link_;
  struct Worker {
    std::string lease;  // the lease it serves ("": a client without one)
    int slot = -1;      // its slot in the shared budgets
    uid_t uid = 0;      // the user it runs as (--worker-uids; else this server's)
    int device = 0;     // the device it serves
    int share = 0;      // the lease's share it serves (its number in the lease's tokens), and its fraction of the device
    double fraction = 1;
    budget::RecordSeal seal{};  // what its export records carry (export_records.h)
    std::string jit_cache;      // the name of its user's JIT cache ("": none; jit_caches.h)
  };
  std::map<pid_t, Worker> workers_by_pid_;
  std::unique_ptr<JitCaches> jit_caches_;        // each lease's user's (none: workers compile PTX at each load)
  std::optional<std::chrono::steady_clock::time_point> jit_caches_bounded_;  // when they were last held to --jit-cache-max
  std::unique_ptr<WorkerUsers> worker_users_;    // --worker-uids: which user each lease's workers run as
  std::map<LeaseShare, ShareState> shares_;  // the leases' shares served here
  std::shared_ptr<budget::SharedBudget> sim_memory_;  // sim: the device's memory, across every worker
  std::shared_ptr<budget::SharedBudget> sim_busy_;    // sim: the device time each worker's kernels took (ns, a slot each)
  // Kernels each worker of a lease launched, in its slot of the lease's page (gpool-worker --launch-counter-fd),
  // and what each lease's ended workers launched: reported with heartbeats (AllocatorLink::launches).
  std::map<std::string, std::shared_ptr<budget::SharedBudget>> launch_pages_;
  std::map<std::string, uint64_t> ended_launches_;
  std::set<std::string> revoked_;
  HeldExports held_exports_;  // ended workers' memory that other processes hold
  asio::steady_timer held_poll_{io_};
  bool watching_held_ = false;
  LeaseGate gate_;
  std::array<uint64_t, kRefusals> refused_{};  // connections turned away, by why (/metrics)
  std::vector<std::string> gpu_uuids_;  // with --allocator: this host's GPUs, as the inventory lists them
  std::unique_ptr<UseAudits> audits_;  // --memory-audit, --compute-audit: leases past their cap or share, as the driver counts
  std::set<pid_t> ended_leftovers_;  // processes workers left, killed, not reaped yet
  std::unique_ptr<MetricsEndpoint> metrics_;   // last: it stops (and stops asking) before the rest goes
};

}  // namespace

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
