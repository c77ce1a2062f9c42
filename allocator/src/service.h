// gpool-allocator's HTTP/JSON API (docs/api.md) over the scheduler and the store: one mutex around the
// state, every change written to the store before any answer goes out (group_commit.h), a background
// tick for heartbeat timeouts, and Prometheus metrics. The routes' answers are members too, each group in
// a file of its own (service.cpp's `routes` lists them).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>

#include <nlohmann/json_fwd.hpp>

#include "authenticator.h"
#include "client_cpu.h"
#include "elastic_pool.h"
#include "gpool/allocator/ed25519_key.h"
#include "group_commit.h"
#include "local_socket.h"
#include "scheduler.h"
#include "store.h"
#include "tcp_listener.h"

namespace gpool::allocator {

struct ServiceOptions {
  std::string db_path;      // the store: a SQLite file, or etcd://... (store.h)
  std::string config_path;  // TOML policy read at start (a policy stored in the database wins otherwise)
  std::string key;          // the admin key (hex): signs admin requests; held by the allocator's host and admins
  std::string token_key;    // Ed25519 private key file signing lease tokens (created when missing, with its .pub)
  std::string munge_socket; // munged's socket ("" = its default)
  std::string local_socket; // a Unix socket serving the API to local users, identified by the kernel ("" = none)
  std::string tls_cert, tls_key;  // PEM files: the TCP listener serves HTTPS ("" = plain HTTP)
  size_t max_connections = 4096;  // TCP connections held at once, and threads answering them at most (made as needed)
  size_t max_connections_per_address = 0;  // of them, held by one peer address at once (0: a quarter; request_gate.h)
  size_t max_unread_answers = size_t{1} << 30;  // bytes of answers not read yet held for each listener (unread_answers.h)
  double max_client_cpu = 0;  // of one CPU, what one client (address, local user) may use on average (client_cpu.h; 0: any)
  double max_client_cpu_total = 0;  // of one CPU, what the clients asking at once may use together (0: no total)
  // Replicas sharing a store (etcd; issue 16): the URL clients reach this one at, which standbys give
  // them while it leads; how long its lead outlives it; what to do once another leads (the process
  // starts again, as a standby).
  std::string advertise;
  int leader_ttl_s = 3;
  EtcdAccess etcd_access;  // how etcd's members are reached over TLS (store.h)
  std::function<void()> on_deposed;
};

class Service {
 public:
  explicit Service(ServiceOptions options);
  ~Service();
  // Binds HOST:PORT (port 0: any); returns the port. Serves on a background thread.
  int start(const std::string& host, int port);
  void stop();

 private:
  void serve(httplib::Server& s);  // settings and routes, for each listener
  void routes(httplib::Server& s);
  struct Caller;

  // gpool-servers' requests (server_routes.cpp)
  bool signedByServer(const httplib::Request& req, httplib::Response& res, const std::string& about);
  void registerServer(const httplib::Request& req, httplib::Response& res);
  void serverHeartbeat(const httplib::Request& req, httplib::Response& res);
  void serverClientLeft(const httplib::Request& req, httplib::Response& res);

  // Leases (lease_routes.cpp)
  void requestLease(const httplib::Request& req, httplib::Response& res);
  void watchLease(const httplib::Request& req, httplib::Response& res);
  void leaseHeartbeat(const httplib::Request& req, httplib::Response& res);
  void releaseLease(const httplib::Request& req, httplib::Response& res);
  void whoami(const httplib::Request& req, httplib::Response& res);
  bool mayRequest(const Caller& c, LeaseRequest& r, httplib::Response& res);  // mu_ held
  const Lease* ownedLease(const httplib::Request& req, httplib::Response& res, const Caller& c);  // mu_ held
  static bool validRequestKey(const nlohmann::json& j, std::string& out);
  void replyAgain(httplib::Response& res, const Lease& l, const std::string& user, const std::string& lease_key);  // mu_ held

  // Admins' changes (admin_routes.cpp)
  void drainServer(const httplib::Request& req, httplib::Response& res);
  void replacePolicy(const httplib::Request& req, httplib::Response& res);
  void changeQueue(const httplib::Request& req, httplib::Response& res, bool remove);
  void enrollServer(const httplib::Request& req, httplib::Response& res);
  void unenrollServer(const httplib::Request& req, httplib::Response& res);
  void issueServiceAccount(const httplib::Request& req, httplib::Response& res);
  void listServiceAccounts(const httplib::Request& req, httplib::Response& res);
  void deleteServiceAccount(const httplib::Request& req, httplib::Response& res);

  // Reads anyone may make (read_routes.cpp)
  void usage(const httplib::Request& req, httplib::Response& res);
  void status(const httplib::Request& req, httplib::Response& res);
  void policyText(const httplib::Request& req, httplib::Response& res);
  nlohmann::json serversJson() const;  // mu_ held
  nlohmann::json queuesJson() const;   // mu_ held

  // Metrics (service_metrics.cpp)
  void metrics(const httplib::Request& req, httplib::Response& res);
  void recordDecision(double seconds);  // mu_ held
  void connectionMetrics(std::ostream& o) const;
  void leaseMetrics(std::ostream& o) const;     // mu_ held
  void decisionMetrics(std::ostream& o) const;  // mu_ held
  void queueMetrics(std::ostream& o) const;     // mu_ held
  void userMetrics(std::ostream& o) const;  // per user: GPUs held, memory, device time, time held back (mu_ held)

  struct Caller {
    Authenticator::Outcome outcome = Authenticator::Outcome::kAnonymous;
    Identity who;
    std::string why;  // kRefused: why
  };
  Caller identify(const httplib::Request& req);  // without mu_: a MUNGE credential is decoded by munged
  bool isAdmin(const Caller& c);                 // signed with the allocator's key, or in access.admins (mu_ held)
  // Whether the caller may act for lease `l`: the request carries the lease's key, or comes from the
  // lease's user or an admin (mu_ held).
  bool mayActFor(const httplib::Request& req, const Caller& c, const Lease& l);
  // The caller when an admin; otherwise replies 401 or 403 and returns nullopt (takes mu_ briefly).
  std::optional<Caller> admin(const httplib::Request& req, httplib::Response& res);
  void load();  // the state, from the store, once this allocator leads it
  void campaign();  // stands by until this allocator leads its replicated store, then loads and serves
  void deposed();   // another leads: nothing more is written or answered
  // A standby's answer (503, naming the leader); false when this allocator leads or `path` is /metrics.
  bool standingBy(const std::string& path, httplib::Response& res);
  // Stages the scheduler's changes for the store (mu_ held); every answer waits until they are written.
  void persist(const std::string* policy_text = nullptr);
  void tickLoop();
  void grantTheRest();  // what the last tick left to grantMore()
  // Whether requests wait unread: connections not yet accepted, or accepted and waiting for a thread.
  bool backlogged();
  void forgetEndedLeases();  // those that ended longer ago than the policy's retention
  // What accounting (GET /v1/usage) counts: the store's leases, ended ones included, read at most every
  // kUsageReadEvery however often it is asked (a scan holds the store's writer back), with the
  // scheduler's own on top (live ones, and those that ended within its minute).
  std::map<std::string, Lease> leasesForUsage();
  static constexpr std::chrono::seconds kUsageReadEvery{30};
  std::mutex usage_mu_;
  std::map<std::string, Lease> usage_store_;
  std::optional<std::chrono::steady_clock::time_point> usage_read_;
  int64_t now() const;
  nlohmann::json withTimes(nlohmann::json j, const Lease& l) const;  // a granted lease's ends_in_ms, idle_ms, preempt_in_ms
  static nlohmann::json useJson(const Lease& l);  // its `use`: memory, device_seconds, held_back_seconds
  static std::optional<Lease::Use> useFrom(const nlohmann::json& u);  // a server's figures of one lease (kUseForm)
  static constexpr const char* kUseForm = "{memory, device_s, held_s}: bytes up to 2^53, seconds up to 1e12";

  ServiceOptions opt_;
  token::Ed25519Key token_key_;  // signs lease tokens (opt_.token_key), read once at start
  std::unique_ptr<Store> store_;
  std::unique_ptr<GroupCommit> commits_;  // every change written to store_ (destroyed first: it writes the rest)
  std::unique_ptr<Scheduler> sched_;
  std::shared_ptr<gpool::PeerConnections> peers_;  // what the TCP listener holds per peer address, refused, cut off
  std::shared_ptr<ClientCpu> client_cpu_;  // each client's share of the CPU, for both listeners
  std::unique_ptr<TcpListener> tcp_;  // HTTPS when a certificate is given
  std::unique_ptr<LocalSocketServer> local_;
  int listen_fd_ = -1;
  std::atomic<ElasticPool*> pool_{nullptr};  // the TCP listener's threads (owned by its server)
  Authenticator auth_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::thread serve_thread_, tick_thread_, campaign_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> leading_{false};  // the state is loaded and this allocator writes the store
  int64_t stalled_ms_ = 0;  // store writes' lateness already forgiven (tick thread)

  // metrics (under mu_)
  uint64_t requests_ = 0, grants_ = 0, refusals_ = 0, queued_ = 0;
  std::vector<double> decision_seconds_;  // recent grant-or-queue decision latencies (ring)
  size_t decision_next_ = 0;
  double decision_sum_ = 0;
  uint64_t decision_count_ = 0;
  std::array<uint64_t, 12> decision_buckets_{};  // service_metrics.cpp's buckets, then +Inf
};

}  // namespace gpool::allocator
