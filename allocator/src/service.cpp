// Routes, request checks, persistence and metrics of gpool-allocator (docs/api.md).
#include "service.h"

#include "gpool/printable.h"
#include "allocator_connection.h"
#include "elastic_pool.h"
#include "request_arrival.h"
#include "signed_request.h"
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
#include "lease_token.h"
#include "model_json.h"

namespace gpool::allocator {

using nlohmann::json;

namespace {

constexpr double kBuckets[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0};


void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  // Messages may echo what a client sent (an id, a name): bytes that are not UTF-8 are replaced.
  res.set_content(body.dump(2, ' ', false, json::error_handler_t::replace) + "\n", "application/json");
}

void error(httplib::Response& res, int status, const std::string& why) { reply(res, status, {{"error", why}}); }

std::string newId() { return "L" + token::randomHex(12); }

int64_t unixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

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
  serverRoutes(s);
  leaseRoutes(s);
  adminRoutes(s);
  readRoutes(s);
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

namespace {

bool parseBody(const httplib::Request& req, httplib::Response& res, json& out) {
  try {
    out = json::parse(req.body.empty() ? "{}" : req.body);
    if (!out.is_object()) throw std::invalid_argument("not an object");
    return true;
  } catch (const std::exception&) {
    error(res, 400, "the body must be a JSON object");
    return false;
  }
}

json identityJson(const Identity& who, bool admin) {
  return {{"user", who.user}, {"group", who.group}, {"groups", who.groups}, {"via", viaName(who.via)}, {"admin", admin}};
}

}  // namespace

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

// gpool-servers: registration, heartbeats and clients that left. Each is signed with the server's own
// key (enrolled by an admin), with its time and a nonce (signed_request.h): accepted once, only while
// recent, and only about that server.
void Service::serverRoutes(httplib::Server& s) {
  auto signedByServer = [this](const httplib::Request& req, httplib::Response& res, const std::string& about) {
    std::string why;
    auto name = auth_.signedByServer(req, why);
    if (!name) return error(res, 401, why), false;
    if (*name != about) return error(res, 403, "server '" + *name + "' may speak only for itself, not '" + gpool::printable(about) + "'"), false;
    return true;
  };

  s.Post("/v1/servers", [this, signedByServer](const httplib::Request& req, httplib::Response& res) {
    json j;
    if (!parseBody(req, res, j)) return;
    if (!signedByServer(req, res, j.contains("name") && j["name"].is_string() ? j["name"].get<std::string>() : "")) return;
    Server srv;
    try {
      srv = serverFromJson(j);
      if (!gpool::isPlainName(srv.name) || srv.gpus.size() > 64 || srv.address.empty() || srv.address.size() > 256)
        throw std::invalid_argument("a name of 1-64 letters, digits, '-', '_' or '.', an address and at most 64 GPUs are required");
      for (const auto& g : srv.gpus)
        if (g.memory == 0 || g.index < 0) throw std::invalid_argument("every GPU needs an index and its memory");
    } catch (const std::exception& e) {
      error(res, 400, std::string("bad server registration: ") + e.what());
      return;
    }
    std::lock_guard lock(mu_);
    spdlog::info("server {} at {} registered {} GPU(s)", srv.name, gpool::printable(srv.address), srv.gpus.size());
    std::string name = srv.name;
    sched_->registerServer(std::move(srv), now());
    persist();
    reply(res, 200, {{"heartbeat_ms", sched_->policy().server_timeout.count() / 3}, {"live", sched_->liveLeasesOn(name)}});
  });

  // Body (optional): {"serving": [lease ids it runs workers for]}; the answer's `revoked` names the ended
  // ones among them, in every answer until the server reports them gone.
  s.Post(R"(/v1/servers/([^/]+)/heartbeat)", [this, signedByServer](const httplib::Request& req, httplib::Response& res) {
    json j;
    if (!signedByServer(req, res, req.matches[1]) || !parseBody(req, res, j)) return;
    std::vector<std::string> serving;
    if (j.contains("serving")) {
      const json& list = j["serving"];
      if (!list.is_array() || list.size() > 4096 ||
          !std::all_of(list.begin(), list.end(), [](const json& x) { return x.is_string() && x.get<std::string>().size() <= 64; }))
        return error(res, 400, "serving must be a list of at most 4096 lease ids");
      serving = list.get<std::vector<std::string>>();
    }
    std::vector<std::pair<std::string, double>> launches;  // lease → kernels its workers here launched
    if (j.contains("launches")) {
      const json& counts = j["launches"];
      if (!counts.is_object() || counts.size() > 4096 || !std::all_of(counts.items().begin(), counts.items().end(), [](const auto& kv) {
            return kv.key().size() <= 64 && kv.value().is_number_unsigned() && kv.value().template get<uint64_t>() <= (1ull << 53);
          }))
        return error(res, 400, "launches must map at most 4096 lease ids to counts of kernels (whole numbers up to 2^53)");
      for (const auto& [lease, n] : counts.items()) launches.emplace_back(lease, n.get<double>());
    }
    std::vector<std::pair<std::string, Lease::Use>> uses;  // lease → what this server measured of its shares
    if (j.contains("use")) {
      const json& all = j["use"];
      const std::string malformed = std::string("use must map at most 4096 lease ids to ") + kUseForm;
      if (!all.is_object() || all.size() > 4096) return error(res, 400, malformed);
      for (const auto& [lease, u] : all.items()) {
        auto use = useFrom(u);
        if (lease.size() > 64 || !use) return error(res, 400, malformed);
        uses.emplace_back(lease, *use);
      }
    }
    std::lock_guard lock(mu_);
    std::vector<std::string> revoked;
    if (!sched_->heartbeatServer(req.matches[1], now(), serving, revoked)) {
      error(res, 404, "unknown server '" + std::string(req.matches[1]) + "': register first");
      return;
    }
    for (const auto& [lease, n] : launches) sched_->reportLaunches(req.matches[1], lease, n, now());
    for (const auto& [lease, u] : uses) sched_->reportUse(req.matches[1], lease, u);
    persist();
    reply(res, 200, {{"revoked", revoked},
                     {"live", sched_->liveLeasesOn(req.matches[1])},
                     {"heartbeat_ms", sched_->policy().server_timeout.count() / 3}});
  });

  s.Post(R"(/v1/servers/([^/]+)/released)", [this, signedByServer](const httplib::Request& req, httplib::Response& res) {
    json j;
    if (!signedByServer(req, res, req.matches[1]) || !parseBody(req, res, j)) return;
    if (!j.contains("lease") || !j["lease"].is_string()) return error(res, 400, "body must be {\"lease\": ID}");
    std::lock_guard lock(mu_);
    bool ended = sched_->clientLeft(req.matches[1], j["lease"].get<std::string>(), now());
    persist();
    reply(res, 200, {{"ended", ended}});
  });
}

// What a lease request may carry as its request_key: a client's random name for it, sent again with a
// retry (after a lost answer, a failover), so that the retry gets the same lease.
bool Service::validRequestKey(const json& j, std::string& out) {
  if (!j.is_string()) return false;
  out = j.get<std::string>();
  return out.size() >= 16 && out.size() <= 128 &&
         std::all_of(out.begin(), out.end(), [](unsigned char ch) { return std::isalnum(ch) || ch == '-' || ch == '_'; });
}

// The answer to a request sent again: the lease it made, as it is now (201 granted, else 202), with the
// same lease key. Only the user who sent it, with its request_key (which the lease key derives from).
void Service::replyAgain(httplib::Response& res, const Lease& l, const std::string& user, const std::string& lease_key) {
  if (l.req.user != user || !token::sameText(l.owner_key_hash, token::sha256Hex(lease_key)))
    return error(res, 409, "this request_key names another request: make a new one for each request");
  json out = toJson(l, LeaseView::kOwner);
  out["lease_key"] = lease_key;
  out["heartbeat_ms"] = sched_->policy().leaseHeartbeat().count();
  if (l.state == LeaseState::kQueued) out["position"] = sched_->position(l.id);
  reply(res, l.state == LeaseState::kGranted ? 201 : 202, out);
}

// Leases: requested by a user the allocator knows (identity.h); read, heartbeated and released by their
// owner (the lease key it got, or its user) or an admin. Others see a lease without its tokens.
void Service::leaseRoutes(httplib::Server& s) {

  s.Post("/v1/leases", [this](const httplib::Request& req, httplib::Response& res) {
    auto t0 = std::chrono::steady_clock::now();
    json j;
    if (!parseBody(req, res, j)) return;
    LeaseRequest r;
    try {
      r = requestFromJson(j);
    } catch (const std::exception& e) {
      return error(res, 400, std::string("bad lease request: ") + e.what());
    }
    std::string request_key;
    if (j.contains("request_key") && !validRequestKey(j["request_key"], request_key))
      return error(res, 400, "request_key must be 16 to 128 characters of A-Z, a-z, 0-9, - and _");
    Caller c = identify(req);
    if (c.outcome == Authenticator::Outcome::kRefused) return error(res, 401, c.why);
    if (c.outcome == Authenticator::Outcome::kAnonymous)
      return error(res, 401, std::string("who is asking? ") + Authenticator::kHowToIdentify);
    std::lock_guard lock(mu_);
    bool admin = isAdmin(c);
    if (r.user.empty()) r.user = c.who.user;
    if (r.user != c.who.user && !admin)
      return error(res, 403, "you are '" + c.who.user + "': only an admin requests leases for another user");
    if (r.group.empty() && r.user == c.who.user) r.group = c.who.group;
    else if (!admin && !c.who.inGroup(r.group))
      return error(res, 403, "user '" + c.who.user + "' is not in group '" + r.group + "'");
    if (r.user == c.who.user) r.member_of = c.who.groups;  // every group's quota applies
    std::string cls = r.priority.empty() ? sched_->policy().default_priority : r.priority;
    if (!admin && !sched_->policy().access.mayUsePriority(cls, c.who.user, c.who.groups))
      return error(res, 403, "user '" + c.who.user + "' may not use priority class '" + cls + "' (the policy's access.priorities)");
    std::string id = newId(), lease_key = "gplk1." + token::randomHex(32);
    if (!request_key.empty()) {  // the same request again (its answer was lost): the same lease
      id = "L" + token::sha256Hex(r.user + "\n" + request_key).substr(0, 24);
      lease_key = "gplk1." + token::sha256Hex("gpool lease key\n" + request_key);
      if (const Lease* l = sched_->lease(id)) return replyAgain(res, *l, r.user, lease_key);
    }
    ++requests_;
    Decision d = sched_->request(r, now(), id, token::sha256Hex(lease_key));
    persist();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    decision_seconds_[decision_next_++ % decision_seconds_.size()] = secs;
    decision_sum_ += secs;
    ++decision_count_;
    size_t b = 0;
    while (b < std::size(kBuckets) && secs > kBuckets[b]) ++b;
    ++decision_buckets_[b];
    if (d.kind == Decision::kRefused) {
      ++refusals_;
      return reply(res, d.lease ? 409 : 422, {{"error", d.reason}, {"refused", true}});
    }
    json out = toJson(*d.lease, LeaseView::kOwner);
    out["lease_key"] = lease_key;  // shown this once: it reads, heartbeats and releases the lease
    out["heartbeat_ms"] = sched_->policy().leaseHeartbeat().count();
    if (d.kind == Decision::kQueued) {
      ++queued_;
      out["position"] = sched_->position(id);
      return reply(res, 202, out);
    }
    ++grants_;
    spdlog::info("lease {} granted to {} ({}): {} x {} GPU", id, gpool::printable(r.user), viaName(c.who.via), r.n, r.p);
    reply(res, 201, out);
  });

  // Long poll: answers when the lease changes or after wait_ms (at most 5000). The owner's polls keep a
  // queued request alive; a granted lease needs its explicit heartbeats.
  s.Get(R"(/v1/leases/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    std::string id = req.matches[1];
    int64_t wait_ms = 0;
    if (req.has_param("wait_ms")) {
      try {
        wait_ms = std::clamp<int64_t>(std::stoll(req.get_param_value("wait_ms")), 0, 5000);
      } catch (...) {
        return error(res, 400, "wait_ms must be a number of milliseconds");
      }
    }
    Caller c = identify(req);
    if (c.outcome == Authenticator::Outcome::kRefused) return error(res, 401, c.why);
    std::unique_lock lock(mu_);
    const Lease* l = sched_->lease(id);
    if (!l) return error(res, 404, "no lease " + id + " (ended more than a minute ago, or never existed)");
    bool owner = mayActFor(req, c, *l);
    if (owner && l->state == LeaseState::kQueued) sched_->heartbeatLease(id, now());
    LeaseState was = l->state;
    std::string reason = l->wait_reason;
    int pos = sched_->position(id);
    int64_t notice = l->preempt_at_ms;
    changed_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] {
      const Lease* x = sched_->lease(id);
      return stopping_ || !x || x->state != was || sched_->position(id) != pos || x->wait_reason != reason ||
             x->preempt_at_ms != notice;
    });
    l = sched_->lease(id);
    if (!l) return error(res, 404, "no lease " + id);
    if (owner && l->state == LeaseState::kQueued) sched_->heartbeatLease(id, now());
    json out = toJson(*l, owner ? LeaseView::kOwner : LeaseView::kPublic);
    out["heartbeat_ms"] = sched_->policy().leaseHeartbeat().count();
    if (l->state == LeaseState::kQueued) out["position"] = sched_->position(id);
    if (l->state == LeaseState::kGranted) out = withTimes(std::move(out), *l);
    else if (l->preempt_at_ms) out["preempt_in_ms"] = std::max<int64_t>(0, l->preempt_at_ms - now());
    reply(res, 200, out);
  });

  // The lease `id` when the caller may act for it; otherwise replies 401, 403 or 404 (mu_ held).
  auto owned = [this](const httplib::Request& req, httplib::Response& res, const Caller& c) -> const Lease* {
    std::string id = req.matches[1];
    if (c.outcome == Authenticator::Outcome::kRefused) return error(res, 401, c.why), nullptr;
    const Lease* l = sched_->lease(id);
    if (!l) return error(res, 404, "no lease " + id), nullptr;
    if (mayActFor(req, c, *l)) return l;
    if (c.outcome == Authenticator::Outcome::kAnonymous)
      return error(res, 401, "only the owner of lease " + id + " (its lease key, or its user) or an admin may do this"), nullptr;
    return error(res, 403, "lease " + id + " is not yours ('" + c.who.user + "'): only its owner or an admin may do this"), nullptr;
  };

  // A heartbeat may carry the job's progress (`progress`: a count in its kind's unit, GPOOL_PROGRESS_FILE).
  s.Post(R"(/v1/leases/([^/]+)/heartbeat)", [this, owned](const httplib::Request& req, httplib::Response& res) {
    json body;
    if (!parseBody(req, res, body)) return;
    std::optional<double> progress;
    if (body.contains("progress")) {
      const json& p = body["progress"];
      if (!p.is_number() || !std::isfinite(p.get<double>()) || p.get<double>() < 0 || p.get<double>() > 1e15)
        return error(res, 400, "progress must be a number from 0 to 1e15 (how far the job got, in its kind's unit)");
      progress = p.get<double>();
    }
    Caller c = identify(req);
    std::lock_guard lock(mu_);
    const Lease* l = owned(req, res, c);
    if (!l) return;
    if (!sched_->heartbeatLease(l->id, now()))
      return reply(res, 410, {{"error", "lease " + l->id + " has ended: " + l->end_reason}, {"state", "ended"}});
    if (progress) sched_->reportProgress(l->id, *progress, now());
    if (sched_->renewTokens(l->id)) persist();
    json out = {{"state", stateName(l->state)}};
    if (l->state == LeaseState::kGranted) {  // the holder's (as GET shows the owner): its command's later processes use them
      json owner = toJson(*l, LeaseView::kOwner);
      out.update({{"shares", owner["shares"]}, {"token_expiry", owner["token_expiry"]}});
    }
    if (l->preempt_at_ms)  // notice: the launcher tells the program, which has this long to stop
      out.update({{"preempt_in_ms", std::max<int64_t>(0, l->preempt_at_ms - now())}, {"preempted_for", l->preempted_for},
                  {"notice", noticeName(l->notice)}});
    reply(res, 200, out);
  });

  s.Delete(R"(/v1/leases/([^/]+))", [this, owned](const httplib::Request& req, httplib::Response& res) {
    Caller c = identify(req);
    std::lock_guard lock(mu_);
    const Lease* l = owned(req, res, c);
    if (!l) return;
    std::string id = l->id;
    json answer = {{"id", id}, {"state", "ended"}};
    if (!l->use_on.empty()) answer["use"] = useJson(*l);  // what it used, for its holder's last word
    answer["ended"] = sched_->end(id, l->state == LeaseState::kQueued ? "cancelled while queued" : "released", now());
    persist();
    reply(res, 200, answer);
  });

  s.Get("/v1/whoami", [this](const httplib::Request& req, httplib::Response& res) {
    Caller c = identify(req);
    if (c.outcome == Authenticator::Outcome::kRefused) return error(res, 401, c.why);
    if (c.outcome == Authenticator::Outcome::kAnonymous) return error(res, 401, std::string("no identity: ") + Authenticator::kHowToIdentify);
    std::lock_guard lock(mu_);
    reply(res, 200, identityJson(c.who, isAdmin(c)));
  });
}

// Admin changes: the policy, drains, service accounts.
void Service::adminRoutes(httplib::Server& s) {

  s.Post(R"(/v1/servers/([^/]+)/drain)", [this](const httplib::Request& req, httplib::Response& res) {
    json j;
    if (!admin(req, res) || !parseBody(req, res, j)) return;
    bool drain = j.value("drain", true);
    std::lock_guard lock(mu_);
    if (!sched_->setDrain(req.matches[1], drain)) return error(res, 404, "unknown server '" + std::string(req.matches[1]) + "'");
    spdlog::info("server {} {}", std::string(req.matches[1]), drain ? "drained: no new shares" : "back in service");
    sched_->tick(now());
    persist();
    reply(res, 200, {{"server", std::string(req.matches[1])}, {"drain", drain}});
  });

  s.Put("/v1/policy", [this](const httplib::Request& req, httplib::Response& res) {
    auto who = admin(req, res);
    if (!who) return;
    Policy p;
    try {
      p = parsePolicy(req.body);
    } catch (const PolicyError& e) {
      return error(res, 400, e.what());
    }
    std::lock_guard lock(mu_);
    std::string text = p.source;
    json notes = p.notes;
    sched_->setPolicy(std::move(p), now());
    persist(&text);
    spdlog::info("policy replaced through the API by {} ({} pools)", gpool::printable(who->who.user), sched_->policy().pools.size());
    for (const auto& note : notes) spdlog::warn("policy: {}", note.get<std::string>());
    reply(res, 200, {{"pools", sched_->policy().pools.size()}, {"notes", notes}});
  });

  // Queues changed at run time (gpool admin queue): PUT sets the keys of a TOML table on queue NAME (made
  // when new), DELETE removes it. The policy in force is rewritten, checked like any other, and applied.
  auto changeQueue = [this](const httplib::Request& req, httplib::Response& res, bool remove) {
    auto who = admin(req, res);
    if (!who) return;
    std::string name = req.matches[1];
    std::lock_guard lock(mu_);
    const auto& queues = sched_->policy().queues;
    if (remove && std::none_of(queues.begin(), queues.end(), [&](const Queue& q) { return q.name == name; }))
      return error(res, 404, "there is no queue '" + name + "'");
    Policy p;
    try {
      p = parsePolicy(withQueue(sched_->policy().source, name, remove ? nullptr : &req.body));
    } catch (const PolicyError& e) {
      return error(res, 400, e.what());
    }
    std::string text = p.source;
    sched_->setPolicy(std::move(p), now());
    persist(&text);
    spdlog::info("queue {} {} by {}", gpool::printable(name), remove ? "removed" : "changed", gpool::printable(who->who.user));
    reply(res, 200, {{"queue", name}, {"removed", remove}, {"queues", queuesJson()}});
  };
  s.Put(R"(/v1/queues/([^/]+))", [changeQueue](const httplib::Request& req, httplib::Response& res) { changeQueue(req, res, false); });
  s.Delete(R"(/v1/queues/([^/]+))", [changeQueue](const httplib::Request& req, httplib::Response& res) { changeQueue(req, res, true); });

  // Enrolling a server: the public key its requests are verified with (PEM text).
  s.Put(R"(/v1/servers/([^/]+)/key)", [this](const httplib::Request& req, httplib::Response& res) {
    auto who = admin(req, res);
    if (!who) return;
    std::string name = req.matches[1];
    if (!gpool::isPlainName(name)) return error(res, 400, "a server name is 1-64 letters, digits, '-', '_' or '.'");
    try {
      auth_.enrollServer(name, req.body);
    } catch (const std::exception& e) {
      return error(res, 400, std::string("the body must be the server's public key: ") + e.what());
    }
    std::lock_guard lock(mu_);
    commits_->direct([&] { store_->saveServerKey(name, &req.body); });
    spdlog::info("server {} enrolled by {}", name, gpool::printable(who->who.user));
    reply(res, 200, {{"server", name}, {"enrolled", true}});
  });

  s.Delete(R"(/v1/servers/([^/]+)/key)", [this](const httplib::Request& req, httplib::Response& res) {
    auto who = admin(req, res);
    if (!who) return;
    std::string name = req.matches[1];
    if (!auth_.removeServer(name)) return error(res, 404, "server '" + gpool::printable(name) + "' is not enrolled");
    std::lock_guard lock(mu_);
    commits_->direct([&] { store_->saveServerKey(name, nullptr); });
    spdlog::info("server {} unenrolled by {}: its requests are refused from now on", name, gpool::printable(who->who.user));
    reply(res, 200, {{"server", name}, {"enrolled", false}});
  });

  s.Post("/v1/service-accounts", [this](const httplib::Request& req, httplib::Response& res) {
    json j;
    auto who = admin(req, res);
    if (!who || !parseBody(req, res, j)) return;
    ServiceAccount issued;
    std::string key;
    try {
      if (!j.contains("name") || !j["name"].is_string()) throw std::invalid_argument("body must be {\"name\": NAME, \"groups\": [...]}");
      auto groups = j.value("groups", std::vector<std::string>{});
      key = auth_.issueKey(j["name"].get<std::string>(), groups, j.value("rotate", false), unixSeconds(), issued);
    } catch (const std::exception& e) {
      return error(res, 400, e.what());
    }
    std::lock_guard lock(mu_);
    commits_->direct([&] { store_->saveServiceAccount(issued.name, &issued); });
    spdlog::info("service account {} {} by {}", issued.name, j.value("rotate", false) ? "given a new key" : "created",
                 gpool::printable(who->who.user));
    reply(res, 201, {{"name", issued.name}, {"groups", issued.groups}, {"key", key}});
  });

  s.Get("/v1/service-accounts", [this](const httplib::Request& req, httplib::Response& res) {
    if (!admin(req, res)) return;
    json out = json::array();
    for (const auto& a : auth_.accounts()) out.push_back({{"name", a.name}, {"groups", a.groups}, {"created_unix_s", a.created_unix_s}});
    reply(res, 200, {{"service_accounts", out}});
  });

  s.Delete(R"(/v1/service-accounts/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (!admin(req, res)) return;
    std::string name = req.matches[1];
    if (!auth_.removeAccount(name)) return error(res, 404, "no service account '" + gpool::printable(name) + "'");
    std::lock_guard lock(mu_);
    commits_->direct([&] { store_->saveServiceAccount(name, nullptr); });
    spdlog::info("service account {} deleted", name);
    reply(res, 200, {{"name", name}, {"deleted", true}});
  });
}

// The policy's queues (fair_share.h): guarantee, limit, weight, what each holds and borrows beyond its
// guarantee, and how many requests of its members wait. With mu_ held.
json Service::queuesJson() const {
  json out = json::array();
  const FairShare& fair = sched_->fairShare();
  if (!fair.active()) return out;
  std::map<std::string, int> waiting;  // queue name -> requests of its members that wait
  for (const Lease* l : sched_->queue())
    if (const Queue* q = sched_->policy().queueOf(l->req.user, l->req.chargedGroups())) ++waiting[q->name];
  for (const auto& v : fair.view()) {
    const Queue& q = *v.queue;
    double guaranteed = q.guarantee.gpus.value_or(0);
    json j{{"name", q.name}, {"parent", q.parent}, {"weight", q.weight}, {"guarantee_gpus", guaranteed}, {"held_gpus", v.gpus},
           {"held_memory", v.memory}, {"borrowed_gpus", std::max(0.0, v.gpus - guaranteed)}, {"waiting", waiting[q.name]}};
    j["limit_gpus"] = q.limit.gpus ? json(*q.limit.gpus) : json(nullptr);
    out.push_back(j);
  }
  return out;
}

// The queues' gauges, from what /v1/status shows of them. With mu_ held.
void Service::queueMetrics(std::ostream& o) const {
  json queues = queuesJson();
  if (queues.empty()) return;
  for (const auto& [key, help] : {std::pair{"guarantee_gpus", "GPUs guaranteed to the queue."},
                                  std::pair{"held_gpus", "GPUs (sums of fractions) the queue's leases hold."},
                                  std::pair{"borrowed_gpus", "GPUs the queue holds beyond its guarantee."},
                                  std::pair{"waiting", "Requests of the queue's members that wait."}}) {
    std::string name = std::string("gpool_queue_") + key;
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n";
    for (const auto& q : queues) o << name << "{queue=\"" << q["name"].get<std::string>() << "\"} " << q[key].dump() << "\n";
  }
}

// Per user, over their granted leases: GPUs held, and what the leases' servers measured of them (heartbeats'
// `use`). Gauges: a lease that ends leaves the sums.
void Service::userMetrics(std::ostream& o) const {
  struct Sums {
    double gpus = 0, memory = 0, device_s = 0, held_s = 0;
  };
  std::map<std::string, Sums> users;
  for (const auto& [id, l] : sched_->live()) {
    if (l->state != LeaseState::kGranted) continue;
    Sums& u = users[l->req.user];
    u.gpus += l->heldGpus();
    const Lease::Use use = l->used();
    u.memory += use.memory, u.device_s += use.device_s, u.held_s += use.held_s;
  }
  for (auto [name, help, field] : {std::tuple{"gpool_user_gpus", "GPUs (sums of fractions) the user's leases hold.", &Sums::gpus},
                                   std::tuple{"gpool_user_memory_bytes", "Device memory the user's leases hold, as their servers measure it.", &Sums::memory},
                                   std::tuple{"gpool_user_device_seconds", "Device time the kernels of the user's live leases took (shares below a whole GPU).", &Sums::device_s},
                                   std::tuple{"gpool_user_held_back_seconds", "Time the launches of the user's live leases waited for their shares.", &Sums::held_s}}) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n";
    const auto was = o.precision(15);  // (bytes and seconds: more than the stream's 6 digits)
    for (const auto& [user, sums] : users) o << name << "{user=\"" << gpool::metricLabel(user) << "\"} " << sums.*field << "\n";
    o.precision(was);
  }
}

// Reads anyone may make: status (without tokens), the policy, metrics.
void Service::readRoutes(httplib::Server& s) {
  // Accounting (usage.h): GPU time per user and group in [from, to), unix seconds; by default the last 7 days.
  s.Get("/v1/usage", [this](const httplib::Request& req, httplib::Response& res) {
    const int64_t now_s = unixSeconds();
    int64_t window[2] = {0, now_s};
    for (int i : {0, 1}) {
      const char* name = i == 0 ? "from" : "to";
      if (!req.has_param(name)) continue;
      const std::string v = req.get_param_value(name);
      char* end = nullptr;
      window[i] = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || window[i] < 0 || window[i] > now_s + 366 * 86400)
        return error(res, 400, std::string(name) + " must be a time in unix seconds");
    }
    if (!req.has_param("from")) window[0] = std::max<int64_t>(0, window[1] - 7 * 86400);
    if (window[0] >= window[1]) return error(res, 400, "from must be before to");
    std::map<std::string, Lease> leases;
    try {
      leases = leasesForUsage();
    } catch (const std::exception& e) {
      return error(res, 503, std::string("reading ended leases: ") + e.what());
    }
    json rows = json::array();  // summed from the copy: the scheduler's lock is not held for it
    for (const Usage& u : usageBetween(leases, window[0], window[1], now_s))
      rows.push_back({{"user", u.user}, {"group", u.group}, {"leases", u.leases}, {"gpu_seconds", u.gpu_seconds},
                      {"gpu_hours", u.gpu_seconds / 3600}, {"memory_gib_hours", u.memory_gib_seconds / 3600}});
    int64_t kept_s = 0;
    {
      std::lock_guard lock(mu_);
      kept_s = std::chrono::duration_cast<std::chrono::seconds>(sched_->policy().ended_lease_retention).count();
    }
    reply(res, 200, {{"from", window[0]}, {"to", window[1]}, {"kept_since", now_s - kept_s}, {"usage", rows}});
  });

  s.Get("/v1/status", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(mu_);
    json servers = json::array(), leases = json::array(), queue = json::array(), pools = json::array();
    for (const auto& [name, srv] : sched_->servers()) {
      json j = toJson(srv);
      const Pool* p = sched_->policy().poolOfServer(name);
      j["pool"] = p ? p->name : "";
      json ending = json::array();  // shares of ended leases whose workers still run there
      for (const auto& d : sched_->drainingOn(name))
        ending.push_back({{"lease", d.lease}, {"device", d.device}, {"fraction", d.fraction}, {"memory", d.memory}});
      j["ended_leases_held"] = ending;
      servers.push_back(j);
    }
    for (const auto& [id, l] : sched_->live())
      if (l->state == LeaseState::kGranted) leases.push_back(withTimes(toJson(*l, LeaseView::kPublic), *l));
    int pos = 0;
    for (const Lease* l : sched_->queue()) {
      json j = toJson(*l, LeaseView::kPublic);
      j["position"] = ++pos;
      queue.push_back(j);
    }
    for (const auto& p : sched_->policy().pools)
      pools.push_back({{"name", p.name}, {"servers", p.servers}, {"fractions", p.fractions}, {"isolation", isolationName(p.isolation)},
                       {"placement", placementName(p.placement)},
                       {"order", orderName(p.order)}, {"heterogeneity", heterogeneityName(p.heterogeneity)},
                       {"moves_per_hour", p.moves_per_hour}, {"round_s", std::chrono::duration<double>(p.round).count()}, {"round_stay", p.round_stay},
                       {"max_time_s", std::chrono::duration<double>(p.max_time).count()},
                       {"idle_timeout_s", std::chrono::duration<double>(p.idle_timeout).count()}});
    auto measuredJson = [](const Throughputs& t) {  // kind → type → what was measured
      json out = json::object();
      for (const auto& [kind, types] : t.measured())
        for (const auto& [type, m] : types) out[kind][type] = {{"per_second", m.rate}, {"samples", m.samples}};
      return out;
    };
    reply(res, 200, {{"servers", servers}, {"leases", leases}, {"queue", queue}, {"pools", pools}, {"queues", queuesJson()},
                     {"measured_throughput", measuredJson(sched_->throughputs())},
                     {"measured_launch_rate", measuredJson(sched_->launchRates())},
                     {"leader", store_->replicated() ? json(opt_.advertise) : json(nullptr)}});
  });

  s.Get("/v1/policy", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(mu_);
    res.set_content(sched_->policy().source.empty() ? "# built-in defaults\n" : sched_->policy().source, "application/toml");
  });

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::ostringstream o;
    o << "# HELP gpool_allocator_leader Whether this allocator decides (1), or stands by for another replica (0).\n"
      << "# TYPE gpool_allocator_leader gauge\ngpool_allocator_leader " << (leading_ ? 1 : 0) << "\n"
      << "# HELP gpool_allocator_connections_refused_total Connections closed unserved, by reason: their address "
         "(or local user) held its share already (address: --max-connections-per-address), a TLS handshake or "
         "request did not arrive whole in time or its answer was not taken in time (slow), every connection was held and it gave "
         "its place to a new one while it waited (displaced), or its answer was dropped, unread, with more bytes of answers "
         "unread than --max-unread-answers (unread).\n# TYPE gpool_allocator_connections_refused_total counter\n"
      << "gpool_allocator_connections_refused_total{reason=\"address\"} " << peers_->refused + (local_ ? local_->peers().refused.load() : 0) << "\n"
      << "gpool_allocator_connections_refused_total{reason=\"slow\"} " << peers_->cut_off + (local_ ? local_->peers().cut_off.load() : 0) << "\n"
      << "gpool_allocator_connections_refused_total{reason=\"displaced\"} " << (tcp_ ? tcp_->displaced() : 0) + (local_ ? local_->displaced() : 0) << "\n"
      << "gpool_allocator_connections_refused_total{reason=\"unread\"} " << (tcp_ ? tcp_->dropped() : 0) + (local_ ? local_->dropped() : 0) << "\n"
      << "# HELP gpool_allocator_requests_held_total Requests (and TLS handshake steps) that waited, whole, for their "
         "client's share of the allocator's CPU (--max-client-cpu).\n# TYPE gpool_allocator_requests_held_total counter\n"
      << "gpool_allocator_requests_held_total " << (tcp_ ? tcp_->heldBack() : 0) + (local_ ? local_->heldBack() : 0) << "\n"
      << "# HELP gpool_allocator_clients_asking Clients (addresses, local users) still paying back the allocator's CPU "
         "they spent, or with a request being answered: those that split --max-client-cpu-total.\n"
         "# TYPE gpool_allocator_clients_asking gauge\n"
      << "gpool_allocator_clients_asking " << (client_cpu_ ? client_cpu_->clients() : 0) << "\n"
      << "# HELP gpool_allocator_client_cpu_share Of one CPU, each client's share of the allocator's CPU now: "
         "--max-client-cpu, or less with more clients asking than --max-client-cpu-total gives that much (0: no limit).\n"
         "# TYPE gpool_allocator_client_cpu_share gauge\n"
      << "gpool_allocator_client_cpu_share " << (client_cpu_ ? client_cpu_->shareNow() : 0) << "\n";
    if (!leading_) return res.set_content(o.str(), "text/plain; version=0.0.4");
    std::lock_guard lock(mu_);
    size_t gpus = 0, up = 0, shares = 0;
    double used = 0;
    for (const auto& [name, srv] : sched_->servers()) {
      gpus += srv.gpus.size();
      if (srv.up && !srv.drain) up += srv.gpus.size();
      for (const auto& g : srv.gpus) used += g.used_fraction;
    }
    for (const auto& [id, l] : sched_->live())
      if (l->state == LeaseState::kGranted) shares += l->shares.size();
    o << "# HELP gpool_gpus GPUs registered.\n# TYPE gpool_gpus gauge\ngpool_gpus " << gpus << "\n"
      << "# HELP gpool_gpus_available GPUs on servers that are up and not drained.\n# TYPE gpool_gpus_available gauge\n"
      << "gpool_gpus_available " << up << "\n"
      << "# HELP gpool_gpu_fraction_in_use Sum of the fractions of GPUs leased.\n# TYPE gpool_gpu_fraction_in_use gauge\n"
      << "gpool_gpu_fraction_in_use " << used << "\n"
      << "# HELP gpool_shares_in_use Shares (one GPU or fraction each) held by leases.\n# TYPE gpool_shares_in_use gauge\n"
      << "gpool_shares_in_use " << shares << "\n"
      << "# HELP gpool_queue_length Requests waiting.\n# TYPE gpool_queue_length gauge\n"
      << "gpool_queue_length " << sched_->queued() << "\n"
      << "# HELP gpool_lease_requests_total Lease requests, by outcome.\n# TYPE gpool_lease_requests_total counter\n"
      << "gpool_lease_requests_total{outcome=\"granted\"} " << grants_ << "\n"
      << "gpool_lease_requests_total{outcome=\"queued\"} " << queued_ << "\n"
      << "gpool_lease_requests_total{outcome=\"refused\"} " << refusals_ << "\n"
      << "# HELP gpool_leases_preempted_total Leases revoked to give a queue its guarantee back.\n"
      << "# TYPE gpool_leases_preempted_total counter\n"
      << "gpool_leases_preempted_total " << sched_->preempted() << "\n"
      << "# HELP gpool_leases_moved_total Leases revoked to move their jobs to a faster GPU type (moves_per_hour).\n"
      << "# TYPE gpool_leases_moved_total counter\n"
      << "gpool_leases_moved_total " << sched_->moved() << "\n"
      << "# HELP gpool_leases_rotated_total Notices given by pools' rounds (round, order max-min): other jobs' turn, or a move to another GPU type.\n"
      << "# TYPE gpool_leases_rotated_total counter\n"
      << "gpool_leases_rotated_total " << sched_->rotated() << "\n"
      << "# HELP gpool_leases_time_limited_total Leases ended at their time limit (gpool run --time, a pool's max_time).\n"
      << "# TYPE gpool_leases_time_limited_total counter\n"
      << "gpool_leases_time_limited_total " << sched_->timeLimited() << "\n"
      << "# HELP gpool_leases_reclaimed_idle_total Leases ended because no kernel ran on their GPUs for their pool's idle_timeout.\n"
      << "# TYPE gpool_leases_reclaimed_idle_total counter\n"
      << "gpool_leases_reclaimed_idle_total " << sched_->reclaimedIdle() << "\n"
      << "# HELP gpool_grant_decision_seconds Time to grant, queue or refuse a request (without the store write its answer then waits for).\n"
      << "# TYPE gpool_grant_decision_seconds histogram\n";
    uint64_t cum = 0;
    for (size_t i = 0; i < std::size(kBuckets); ++i) {
      cum += decision_buckets_[i];
      o << "gpool_grant_decision_seconds_bucket{le=\"" << kBuckets[i] << "\"} " << cum << "\n";
    }
    cum += decision_buckets_[std::size(kBuckets)];
    o << "gpool_grant_decision_seconds_bucket{le=\"+Inf\"} " << cum << "\n"
      << "gpool_grant_decision_seconds_sum " << decision_sum_ << "\n"
      << "gpool_grant_decision_seconds_count " << decision_count_ << "\n";
    std::vector<double> recent(decision_seconds_.begin(),
                               decision_seconds_.begin() + static_cast<long>(std::min<size_t>(decision_count_, decision_seconds_.size())));
    std::sort(recent.begin(), recent.end());
    o << "# HELP gpool_grant_decision_recent_seconds Quantiles of the last 4096 decisions.\n"
      << "# TYPE gpool_grant_decision_recent_seconds gauge\n";
    for (double q : {0.5, 0.99, 0.999})
      if (!recent.empty())
        o << "gpool_grant_decision_recent_seconds{quantile=\"" << q << "\"} "
          << recent[std::min(recent.size() - 1, static_cast<size_t>(q * static_cast<double>(recent.size())))] << "\n";
    queueMetrics(o);
    userMetrics(o);
    o << "# HELP gpool_store_transactions_total Store transactions written (each holds the changes of one request or more).\n"
      << "# TYPE gpool_store_transactions_total counter\ngpool_store_transactions_total " << commits_->transactions() << "\n"
      << "# HELP gpool_store_changes_total Changes (requests, ticks) written to the store.\n"
      << "# TYPE gpool_store_changes_total counter\ngpool_store_changes_total " << commits_->changesWritten() << "\n";
    res.set_content(o.str(), "text/plain; version=0.0.4");
  });

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
