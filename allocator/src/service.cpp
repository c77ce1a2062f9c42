// gpool-allocator's service: its listeners, its state (loaded from the store, written after each change),
// leadership among replicas, the tick, who is asking, and the API's routes (docs/api.md).
#include "service.h"

#include "api_answers.h"
#include "elastic_pool.h"
#include "gpool/allocator/allocator_connection.h"
#include "gpool/allocator/signed_request.h"
#include "gpool/printable.h"
#include "request_arrival.h"
#include "tcp_listener.h"
#include "usage.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <array>
#include <chrono>
#include <cctype>
#include <cmath>
#include <optional>
#include <fstream>
#include <sstream>

#include "etcd_leader.h"
#include "gpool/allocator/lease_token.h"
#include "model_json.h"

namespace gpool::allocator {

using nlohmann::json;

int64_t Service::now() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Service::Service(ServiceOptions options)
    : opt_(std::move(options)), token_key_(token::Ed25519Key::loadPrivate(opt_.token_key, true)), auth_(opt_.key, opt_.munge_socket) {
  peers_ = std::make_shared<gpool::PeerConnections>(opt_.max_connections_per_address ? opt_.max_connections_per_address
                                                                                     : opt_.max_connections / 4);
  store_ = openStore(opt_.db_path, opt_.etcd_access);
  commits_ = std::make_unique<GroupCommit>(*store_, [this] { deposed(); });
  // Tokens one replica signed must verify after a failover; admins' signatures must hold at every replica.
  store_->agreeOn("token-key", token::sha256Hex(token_key_.publicPem()).substr(0, 16),
                  "give every replica a copy of the same --token-key file (and its .pub)");
  store_->agreeOn("admin-key", token::sha256Hex("gpool admin key fingerprint\n" + opt_.key).substr(0, 16),
                  "give every replica a copy of the same --key-file");
  decision_seconds_.assign(4096, 0);
  if (!store_->replicated()) load();
}

void Service::load() {
  Policy policy;
  std::string source;
  if (auto stored = store_->policyText()) {
    policy = parsePolicy(*stored);  // the last policy applied at run time
    source = "the database";
    if (!opt_.config_path.empty())
      spdlog::info("policy: keeping the policy stored in {} (apply {} with `gpool admin policy apply` to replace it)",
                   opt_.db_path, opt_.config_path);
  } else if (!opt_.config_path.empty()) {
    std::ifstream f(opt_.config_path);
    if (!f) throw PolicyError("cannot read the policy file " + opt_.config_path);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    policy = parsePolicy(text);
    source = opt_.config_path;
  } else {
    source = "built-in defaults";
  }
  sched_ = std::make_unique<Scheduler>(
      policy,
      [key = token_key_](const Lease& l, const Share& s, int index, int64_t expiry) {
        return token::sign({l.id, s.server, s.device, s.memory, s.fraction, expiry, index, l.req.user}, key);
      },
      unixSeconds);
  auth_.restoreAccounts(store_->serviceAccounts());
  auth_.restoreServerKeys(store_->serverKeys());
  auto servers = store_->servers();
  auto leases = store_->leases(false);
  spdlog::info("state: {} servers, {} live leases from {}; policy from {} ({} pools)", servers.size(), leases.size(),
               opt_.db_path, source, policy.pools.size());
  for (const std::string& note : policy.notes) spdlog::warn("policy: {}", note);
  sched_->restore(std::move(servers), std::move(leases), now());
  std::string text = policy.source;
  persist(&text);
}

Service::~Service() { stop(); }

void Service::persist(const std::string* policy_text) {
  commits_->stage(Changes::of(*sched_, sched_->takeDirtyServers(), sched_->takeDirtyLeases(), policy_text));
  changed_.notify_all();
}

void Service::deposed() {
  leading_ = false;
  if (opt_.on_deposed) opt_.on_deposed();
}

void Service::campaign() {
  Campaign c;
  c.me = opt_.advertise;
  c.ttl_s = opt_.leader_ttl_s;
  c.stop = &stopping_;
  c.standing_by = [this](const std::string& leader) {
    spdlog::info("standing by: {} leads the replicas sharing {}; this one takes over when it stops", gpool::printable(leader), opt_.db_path);
  };
  c.lost = [this] { deposed(); };
  try {
    if (!store_->lead(std::move(c)) || stopping_) return;
    std::lock_guard lock(mu_);
    load();
    // The failover was an outage of the allocator: like a stall (tickLoop), it counts against no server
    // and no lease. Each gets as long again as the lead took to lapse, to find this leader.
    sched_->forgive(int64_t{opt_.leader_ttl_s} * 1000);
  } catch (const std::exception& e) {
    spdlog::critical("taking the lead: {}", e.what());
    deposed();
    return;
  }
  spdlog::info("leading: this allocator ({}) now decides for the replicas sharing {}", opt_.advertise, opt_.db_path);
  leading_ = true;
  tick_thread_ = std::thread([this] { tickLoop(); });
}

// A granted lease's times that depend on now: `ends_in_ms` (its time limit, where it has one), `idle_ms`
// (since a kernel last ran on its GPUs, or its grant) and `preempt_in_ms` (while it has notice).
json Service::withTimes(json j, const Lease& l) const {
  const int64_t t = now();
  if (l.req.time_limit_ms > 0) j["ends_in_ms"] = std::max<int64_t>(0, l.limit_from_ms + l.req.time_limit_ms - t);
  if (l.preempt_at_ms) j["preempt_in_ms"] = std::max<int64_t>(0, l.preempt_at_ms - t);
  j["idle_ms"] = std::max<int64_t>(0, t - l.active_ms);
  if (!l.use_on.empty()) j["use"] = useJson(l);
  return j;
}

// One lease's figures in a server's heartbeat, when they are well formed and in bounds.
std::optional<Lease::Use> Service::useFrom(const json& u) {
  auto figure = [&](const char* name, double most) {
    return u.contains(name) && u[name].is_number() && u[name].get<double>() >= 0 && u[name].get<double>() <= most;
  };
  if (!u.is_object() || u.size() != 3 || !figure("memory", 0x1p53) || !figure("device_s", 1e12) || !figure("held_s", 1e12))
    return std::nullopt;
  return Lease::Use{u["memory"].get<double>(), u["device_s"].get<double>(), u["held_s"].get<double>()};
}

// What a lease's servers last measured of it, summed over them (their heartbeats' `use`).
json Service::useJson(const Lease& l) {
  const Lease::Use sum = l.used();
  return {{"memory", sum.memory}, {"device_seconds", sum.device_s}, {"held_back_seconds", sum.held_s}};
}

bool Service::standingBy(const std::string& path, httplib::Response& res) {
  if (leading_ || path == "/metrics") return false;
  std::string leader = store_->leaderSeen();
  res.set_header("Retry-After", "1");
  reply(res, 503, {{"error", leader.empty() ? "this gpool-allocator replica is starting or standing by, and no leader is known yet; try again"
                                             : "this gpool-allocator replica is standing by; the leader is " + leader},
                   {"standby", true}, {"leader", leader}});
  return true;
}

namespace {

// Where clients reach an allocator listening on HOST:PORT: what standbys tell them while it leads.
std::string advertisedUrl(std::string host, int port, bool tls) {
  if (host == "0.0.0.0" || host == "::" || host.empty()) {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    host = name;
  } else if (host.find(':') != std::string::npos) {
    host = "[" + host + "]";
  }
  return std::string(tls ? "https://" : "http://") + host + ":" + std::to_string(port);
}

}  // namespace

int Service::start(const std::string& host, int port) {
  tcp_ = std::make_unique<TcpListener>(peers_, opt_.tls_cert, opt_.tls_key);
  if (!tcp_->valid())
    throw std::runtime_error("cannot serve TLS with certificate " + opt_.tls_cert + " and key " + opt_.tls_key +
                             " (unreadable, not PEM, or the key does not match the certificate)");
  serve(tcp_->routes());
  RequestGate::Options limits;
  limits.max_connections = opt_.max_connections;
  limits.max_unread = opt_.max_unread_answers;
  client_cpu_ = std::make_shared<ClientCpu>(opt_.max_client_cpu, opt_.max_client_cpu_total);
  limits.client_cpu = client_cpu_;
  int bound = tcp_->bindWide(host, port, limits);
  listen_fd_ = tcp_->fd();
  if (bound < 0) throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + " (in use, or not an address of this host)");
  if (!opt_.local_socket.empty()) {
    local_ = std::make_unique<LocalSocketServer>();
    serve(*local_);
    local_->listenLocal(opt_.local_socket, limits);
  }
  serve_thread_ = std::thread([this] { tcp_->run(); });
  if (opt_.advertise.empty()) opt_.advertise = advertisedUrl(host, bound, !opt_.tls_cert.empty());
  if (store_->replicated()) {
    campaign_thread_ = std::thread([this] { campaign(); });
  } else {
    leading_ = true;
    tick_thread_ = std::thread([this] { tickLoop(); });
  }
  return bound;
}

// What both listeners share: the body limit, the refusal of chunked bodies, the routes.
void Service::serve(httplib::Server& s) {
  size_t threads = opt_.max_connections;
  s.new_task_queue = [this, threads] {  // asked for by the TCP listener only (the local one has its own threads)
    auto* pool = new ElasticPool(threads);
    pool_ = pool;
    return pool;
  };
  s.set_payload_max_length(kMaxRequestBody);
  // httplib limits only bodies with a Content-Length: a chunked one is refused from its headers, unread.
  s.set_tcp_nodelay(true);  // replies go out in several writes: no Nagle/delayed-ACK stalls
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (standingBy(req.path, res)) return httplib::Server::HandlerResponse::Handled;
    std::string encoding = req.get_header_value("Transfer-Encoding");
    std::transform(encoding.begin(), encoding.end(), encoding.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (encoding.empty()) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("Connection", "close");
    error(res, 411, "request bodies must come with a Content-Length (at most 1 MiB), not a Transfer-Encoding");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Nothing an answer says may be lost by a crash: it waits until every change made before it is written.
  s.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    if (auto held = RequestGate::heldBeforeAnswer(); held.count() > 0) res.set_header(token::kHeldHeader, std::to_string(held.count()));
    if (commits_->waitForStaged(std::chrono::seconds(30))) return;
    res.set_header("Connection", "close");
    error(res, 503, "this allocator could not store its state (it no longer leads, or its store is out of reach); ask again");
  });
  routes(s);
}

void Service::stop() {
  if (stopping_.exchange(true)) return;
  changed_.notify_all();  // long polls answer at once
  if (campaign_thread_.joinable()) campaign_thread_.join();
  if (tick_thread_.joinable()) tick_thread_.join();  // first: it looks at the listener's thread pool
  pool_ = nullptr;
  if (tcp_) tcp_->halt();
  if (local_) local_->stopLocal();
  if (serve_thread_.joinable()) serve_thread_.join();
}

// Ended leases stay in the database for the policy's retention period (for accounting), then leave it.
void Service::forgetEndedLeases() {
  std::lock_guard lock(mu_);  // the store's connection is the request path's too
  int64_t cutoff = unixSeconds() - std::chrono::duration_cast<std::chrono::seconds>(sched_->policy().ended_lease_retention).count();
  try {
    if (int n = commits_->direct([&] { return store_->forgetEndedBefore(cutoff); })) spdlog::info("forgot {} lease(s) that ended more than the retention period ago", n);
  } catch (const std::exception& e) {
    spdlog::error("forgetting ended leases: {}", e.what());
  }
}

std::map<std::string, Lease> Service::leasesForUsage() {
  std::map<std::string, Lease> leases;
  {
    std::lock_guard lock(usage_mu_);
    auto t = std::chrono::steady_clock::now();
    if (!usage_read_ || t - *usage_read_ >= kUsageReadEvery) {
      usage_store_ = commits_->direct([&] { return store_->leases(true); });
      usage_read_ = t;
    }
    leases = usage_store_;
  }
  std::lock_guard lock(mu_);
  for (const auto& [id, l] : sched_->leases()) leases[id] = l;
  return leases;
}

// Where a tick freed room for more than one pass grants, the rest is granted pass by pass, and requests
// waiting for the lock are let in between.
void Service::grantTheRest() {
  while (!stopping_) {
    {
      std::lock_guard lock(mu_);
      if (!sched_->moreToGrant()) return;
      if (sched_->grantMore(now())) persist();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool Service::backlogged() {
  if (ElasticPool* pool = pool_.load(); pool && pool->waiting() > 0) return true;
  tcp_info info{};
  socklen_t len = sizeof info;
  // For a listening socket, tcpi_unacked is the number of connections waiting to be accepted.
  return listen_fd_ >= 0 && ::getsockopt(listen_fd_, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_unacked > 0;
}

void Service::tickLoop() {
  uint64_t ticks = 0;
  int64_t last = now();
  while (!stopping_) {
    {
      std::lock_guard lock(mu_);
      // A tick far later than planned: the allocator itself was stopped or starved, and heartbeats that
      // came meanwhile may not have been read yet. That time counts against nobody.
      // One reading of the clock for the check and the tick: a stop between two readings would judge
      // heartbeats by a time the check never saw.
      const int64_t t = now();
      if (int64_t late = t - last - 100; late > 1000) {
        spdlog::warn("the allocator could not run for {} ms (stopped or starved); heartbeat timeouts are extended by as much", late);
        sched_->forgive(late);
      }
      // While a store write is late, every answer waits for it, heartbeats' included: nobody is judged
      // meanwhile, and the time it took counts against nobody.
      if (int64_t s = commits_->stalledMs(); s > stalled_ms_) {
        spdlog::warn("store writes were {} ms late (its members failing over?); heartbeat timeouts are extended by as much", s - stalled_ms_);
        sched_->forgive(s - stalled_ms_);
        stalled_ms_ = s;
      }
      last = t;
      try {
        if (sched_->tick(t, !backlogged() && !commits_->stalled())) persist();
        sched_->prune(now(), 60 * 1000);  // ended leases stay readable for a minute (and in the database)
      } catch (const std::exception& e) {
        spdlog::error("tick: {}", e.what());
      }
    }
    grantTheRest();
    if (++ticks % 10 == 0) store_->checkpoint();  // once a second, without the state lock
    if (ticks % 600 == 0) forgetEndedLeases();     // once a minute
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Service::Caller Service::identify(const httplib::Request& req) {
  Caller c;
  c.outcome = auth_.identify(req, c.who, c.why);
  return c;
}

bool Service::isAdmin(const Caller& c) {
  return c.outcome == Authenticator::Outcome::kKnown &&
         (c.who.signed_by_admin_key || sched_->policy().access.isAdmin(c.who.user, c.who.groups));
}

bool Service::mayActFor(const httplib::Request& req, const Caller& c, const Lease& l) {
  std::string key = req.get_header_value("X-Gpool-Lease-Key");
  if (!key.empty() && !l.owner_key_hash.empty() && token::sameText(token::sha256Hex(key), l.owner_key_hash)) return true;
  return c.outcome == Authenticator::Outcome::kKnown && (c.who.user == l.req.user || isAdmin(c));
}

std::optional<Service::Caller> Service::admin(const httplib::Request& req, httplib::Response& res) {
  Caller c = identify(req);
  if (c.outcome == Authenticator::Outcome::kRefused) return error(res, 401, c.why), std::nullopt;
  if (c.outcome == Authenticator::Outcome::kAnonymous)
    return error(res, 401, "admin requests must prove who sends them: sign them with the allocator's key (gpool admin "
                           "--key-file FILE, or GPOOL_KEY_FILE), or " + std::string(Authenticator::kHowToIdentify)), std::nullopt;
  std::lock_guard lock(mu_);
  if (!isAdmin(c))
    return error(res, 403, "user '" + c.who.user + "' is not an admin (the policy's access.admins lists who is)"), std::nullopt;
  return c;
}

// The API's routes (docs/api.md), each answered by the member it names: server_routes.cpp (gpool-servers,
// each request signed with the server's key), lease_routes.cpp, admin_routes.cpp, read_routes.cpp and
// service_metrics.cpp.
void Service::routes(httplib::Server& s) {
  using Answer = void (Service::*)(const httplib::Request&, httplib::Response&);
  auto by = [this](Answer answer) {
    return [this, answer](const httplib::Request& req, httplib::Response& res) { (this->*answer)(req, res); };
  };
  s.Post("/v1/servers", by(&Service::registerServer));
  s.Post(R"(/v1/servers/([^/]+)/heartbeat)", by(&Service::serverHeartbeat));
  s.Post(R"(/v1/servers/([^/]+)/released)", by(&Service::serverClientLeft));

  s.Post("/v1/leases", by(&Service::requestLease));
  s.Get(R"(/v1/leases/([^/]+))", by(&Service::watchLease));
  s.Post(R"(/v1/leases/([^/]+)/heartbeat)", by(&Service::leaseHeartbeat));
  s.Delete(R"(/v1/leases/([^/]+))", by(&Service::releaseLease));
  s.Get("/v1/whoami", by(&Service::whoami));

  s.Post(R"(/v1/servers/([^/]+)/drain)", by(&Service::drainServer));
  s.Put("/v1/policy", by(&Service::replacePolicy));
  s.Put(R"(/v1/queues/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) { changeQueue(req, res, false); });
  s.Delete(R"(/v1/queues/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) { changeQueue(req, res, true); });
  s.Put(R"(/v1/servers/([^/]+)/key)", by(&Service::enrollServer));
  s.Delete(R"(/v1/servers/([^/]+)/key)", by(&Service::unenrollServer));
  s.Post("/v1/service-accounts", by(&Service::issueServiceAccount));
  s.Get("/v1/service-accounts", by(&Service::listServiceAccounts));
  s.Delete(R"(/v1/service-accounts/([^/]+))", by(&Service::deleteServiceAccount));

  s.Get("/v1/usage", by(&Service::usage));
  s.Get("/v1/status", by(&Service::status));
  s.Get("/v1/policy", by(&Service::policyText));
  s.Get("/metrics", by(&Service::metrics));

  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string why = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    spdlog::error("{} {}: {}", gpool::printable(req.method), gpool::printable(req.path), why);
    error(res, 500, why);
  });
}

}  // namespace gpool::allocator
