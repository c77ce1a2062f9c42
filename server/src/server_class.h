// gpool-server's class (runServer in listener.h runs one): its members are defined by concern in listener.cpp
// (start, accepting and checking each Hello, admitting leases, revocation, JIT caches, audits and metrics),
// worker_start.cpp (a worker's options, pages, slot and process) and worker_exits.cpp (reaping workers, what
// they leave, and when a lease's share here is free).
#pragma once

#include <algorithm>
#include <asio.hpp>
#include <chrono>
#include <climits>
#include <fcntl.h>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <string_view>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "allocator_link.h"
#include "compute_pace.h"
#include "gpool/allocator/lease_token.h"
#include "gpool/hex.h"
#include "gpool/landlock_abi.h"
#include "gpool/peer_connections.h"
#include "gpool/printable.h"
#include "gpool/protocol/driver_settings.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/handshake.h"
#include "held_exports.h"
#include "jit_caches.h"
#include "lease_gate.h"
#include "leftover_processes.h"
#include "listener.h"
#include "server_metrics.h"
#include "shared_budget.h"
#include "use_audits.h"
#include "worker_environment.h"
#include "worker_log.h"
#include "worker_users.h"

namespace gpool::server {

class Server {
 public:
  using tcp = asio::ip::tcp;
  Server(ServerOptions o) : opt_(std::move(o)), acceptor_(io_), signals_(io_, SIGINT, SIGTERM), children_(io_, SIGCHLD) {}

  int run();

 private:
  tcp::endpoint listenEndpoint() const;

  void prepareWorkers();

  void listen(const tcp::endpoint& ep);

  void linkToAllocator(const tcp::endpoint& ep);

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

  void awaitSignal();

  void accept();

  bool admitted(Pending& p);

  static std::string peer(const std::shared_ptr<Pending>& p);

  void handshake(std::shared_ptr<Pending> p);

  void close(const std::shared_ptr<Pending>& p);

  static Refusal refusalOf(int32_t status);

  void refuse(const std::shared_ptr<Pending>& p, int32_t status, const std::string& why);

  void onHello(const std::shared_ptr<Pending>& p);

  size_t workersOf(const std::string& lease) const;
  std::string noRoomFor(const std::string& lease) const;

  // A valid token is served only while the allocator calls its lease live here (lease_gate.h); a client
  // whose lease the last answer did not list waits for the next one, at most kLeaseConfirmMs.
  static constexpr int kLeaseConfirmMs = 10000;
  void admitLease(const std::shared_ptr<Pending>& p, const proto::HelloRequest& hello, const token::Claims& lease);

  void revoke(const std::string& lease);

  static bool gone(const std::shared_ptr<Pending>& p);

  void reportServing();

  std::map<std::string, AllocatorLink::LeaseSources> leaseSources() const;

  int freeSlot() const;

  // One share of a lease's memory and compute, across its workers here. A lease's shares are numbered in
  // its tokens; two of them on one GPU are two devices to the program, each with its own memory and time.
  using LeaseShare = std::pair<std::string, int>;  // (lease, share)
  struct ShareState {
    int device = 0;
    double fraction = 1;
    std::shared_ptr<budget::SharedBudget> memory;  // its cap, when it has one
    std::shared_ptr<budget::ComputePace> pace;     // below a whole GPU
  };
  ShareState& shareOf(const token::Claims& lease);
  std::shared_ptr<budget::SharedBudget> launchPageOf(const std::string& lease);
  void forgetShares(const std::string& lease);

  void sayWhetherWorkersAreSandboxed() const;

  void openJitCaches();
  void boundJitCaches();
  std::optional<std::filesystem::path> jitCacheOf(const std::optional<token::Claims>& lease, std::optional<uid_t> uid);

  void startAudits();
  UseAudits::Served served() const;

  std::optional<ServerFigures> gathered();
  ServerFigures figuresNow() const;

  std::vector<std::string> workerOptions(const proto::HelloRequest& hello, uint64_t hello_seq) const;

  // The pages a worker shares with the other workers of its lease (or, for a client without a lease, has to
  // itself), each handed to it as a descriptor. Throws std::runtime_error when one cannot be made.
  struct WorkerPages {
    std::shared_ptr<budget::SharedBudget> memory;    // the share's cap, held across all the lease's workers using it
    std::shared_ptr<budget::ComputePace> pace;       // its compute share, paced across them likewise
    std::shared_ptr<budget::SharedBudget> launches;  // the lease's launch counters (a client without a lease: none)
  };
  WorkerPages pagesFor(const std::optional<token::Claims>& lease, double share);

  pid_t spawn(std::vector<std::string> args, int socket, const std::vector<std::pair<int, const char*>>& fds,
              std::vector<std::string> env, const std::string& lease);

  void spawnWorker(const std::shared_ptr<Pending>& p, const proto::HelloRequest& hello,
                   const std::optional<token::Claims>& lease);

  void watchChildren();

  void endLeftovers();

  void endWorkers();

  void workerEnded(pid_t pid);

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
  void forgetLease(const std::string& lease);
  void leaveIfDone(const std::string& lease);
  std::string probeUser() const;

  // Looks, while other processes hold memory of ended workers, every kHeldPollMs for what they let go.
  static constexpr int kHeldPollMs = 200;
  void watchHeldExports();
  void settleHeldExports();

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

}  // namespace gpool::server
