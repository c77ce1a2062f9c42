#include "allocator_link.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "gpool/allocator/allocator_connection.h"
#include "gpool/allocator/lease_token.h"
#include "gpool/allocator/signed_request.h"
#include "gpool/printable.h"

namespace gpool::server {

AllocatorLink::AllocatorLink(std::string url, const std::string& ca_file, token::Ed25519Key key, std::string name, std::string registration,
                             std::function<void(const std::string&)> revoked, Live live)
    : url_(std::move(url)), key_(std::move(key)), name_(std::move(name)), registration_(std::move(registration)),
      replicas_(std::make_unique<token::AllocatorReplicas>(url_, ca_file, 5)), revoked_(std::move(revoked)), live_(std::move(live)) {
  thread_ = std::thread([this] { loop(); });
}

AllocatorLink::~AllocatorLink() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void AllocatorLink::released(const std::string& lease) {
  {
    std::lock_guard lock(mu_);
    released_.push_back(lease);
  }
  cv_.notify_all();
}

void AllocatorLink::serving(std::vector<std::string> leases) {
  std::sort(leases.begin(), leases.end());
  bool added;
  {
    std::lock_guard lock(mu_);
    added = !std::includes(serving_.begin(), serving_.end(), leases.begin(), leases.end());
    serving_ = std::move(leases);
  }
  if (added) refresh();
}

void AllocatorLink::leaseSources(std::map<std::string, LeaseSources> by_lease) {
  std::lock_guard lock(mu_);
  lease_sources_ = std::move(by_lease);
}

namespace {
constexpr uint64_t kMostCount = 1ull << 53;  // of launches or bytes, what the allocator takes in a heartbeat
constexpr double kMostSeconds = 1e12;

uint64_t addAtMost(uint64_t a, uint64_t b) { return std::min(kMostCount, std::min(a, kMostCount) + std::min(b, kMostCount)); }
double secondsOf(int64_t ns) { return std::clamp(static_cast<double>(ns) / 1e9, 0.0, kMostSeconds); }
}  // namespace

uint64_t AllocatorLink::LeaseSources::launched() const {
  uint64_t n = std::min(ended, kMostCount);
  for (int slot : slots) n = addAtMost(n, launches ? launches->heldBy(slot) : 0);
  return n;
}

uint64_t AllocatorLink::refresh() {
  uint64_t next;
  {
    std::lock_guard lock(mu_);
    wake_ = true;
    next = requests_ + 1;
  }
  cv_.notify_all();
  return next;
}

// What an answer to a registration or heartbeat carries: leases to stop, and the ones that are live.
static void readAnswer(const nlohmann::json& j, uint64_t request, const std::function<void(const std::string&)>& revoked,
                       const AllocatorLink::Live& live) {
  if (j.contains("revoked") && j["revoked"].is_array())
    for (const auto& id : j["revoked"])
      if (id.is_string()) revoked(id.get<std::string>());
  if (j.contains("live") && j["live"].is_array()) {
    std::vector<std::string> ids;
    for (const auto& id : j["live"])
      if (id.is_string()) ids.push_back(id.get<std::string>());
    live(std::move(ids), request);
  }
}

httplib::Result AllocatorLink::post(const std::string& path, const std::string& body) {
  return replicas_->ask(
      [&](httplib::Client& cli) {
        httplib::Headers h;
        for (auto& [name, value] : token::signRequest(key_, name_, "POST", path, body)) h.emplace(name, value);  // a nonce each
        return cli.Post(path.c_str(), h, body, "application/json");
      },
      [this](const std::string& url, const std::string& said) {
        if (replicas_->size() > 1 || said.rfind("stands by", 0) == 0) spdlog::info("allocator {} {}; asking the next", url, said);
      });
}

// Sends the releases queued; stops at the first that fails (tried again after the next wait). mu_ held.
void AllocatorLink::sendReleased(std::unique_lock<std::mutex>& lock) {
  while (!released_.empty()) {
    std::string lease = released_.front();
    lock.unlock();
    auto r = post("/v1/servers/" + name_ + "/released", nlohmann::json{{"lease", lease}}.dump());
    lock.lock();
    if (!r) return;
    released_.pop_front();
  }
}

// A heartbeat's body: the leases served, and what each lease's workers here launched and use. mu_ held.
std::string AllocatorLink::heartbeat() const {
  nlohmann::json launched = nlohmann::json::object(), use = nlohmann::json::object();
  for (const auto& [lease, from] : lease_sources_) {
    uint64_t memory = 0;
    launched[lease] = from.launched();
    double busy_s = 0, held_s = 0;
    for (const auto& b : from.memory) memory = addAtMost(memory, b->used());
    for (const auto& p : from.paces) busy_s += secondsOf(p->busyNs()), held_s += secondsOf(p->waitedNs());
    use[lease] = {{"memory", memory}, {"device_s", std::min(busy_s, kMostSeconds)}, {"held_s", std::min(held_s, kMostSeconds)}};
  }
  return nlohmann::json{{"serving", serving_}, {"launches", launched}, {"use", use}}.dump();
}

// What the allocator answered to `path` (request number `request`): how long to wait before the next.
int AllocatorLink::answered(const httplib::Result& r, const std::string& path, uint64_t request) {
  if (!r) {
    spdlog::warn("allocator {} unreachable ({}{}); retrying in {} ms", replicas_->all(), httplib::to_string(r.error()),
                 r.error() == httplib::Error::SSLServerVerification ? ": its certificate does not verify; give its CA with --allocator-ca" : "",
                 backoff_ms_);
    int wait_ms = backoff_ms_;
    // One replica: back off to 10 s. Several: a failover is under way or soon over; keep asking often,
    // so that the new leader hears from this server well within its timeout.
    backoff_ms_ = std::min(backoff_ms_ * 2, replicas_->size() > 1 ? 500 : 10000);
    return wait_ms;
  }
  if (r->status == 404 && registered_) {
    spdlog::warn("the allocator does not know this server (restarted without its database?); registering again");
    registered_ = false;
    return 0;
  }
  if (!token::standbyLeader(r->status, r->body).empty()) {  // a failover: soon over
    spdlog::warn("no allocator replica of {} leads yet; asking again in 500 ms", replicas_->all());
    return 500;
  }
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status != 200) {
    std::string why = j.is_object() && j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>() : r->body;
    spdlog::error("allocator refused {}: {} {} (retrying in {} ms)", path, r->status, gpool::printable(why), backoff_ms_);
    int wait_ms = backoff_ms_;
    backoff_ms_ = std::min(backoff_ms_ * 2, 10000);
    return wait_ms;
  }
  backoff_ms_ = 500;
  if (!registered_) spdlog::info("registered with allocator {} as {}", replicas_->url(), name_);
  registered_ = true;
  if (j.is_object()) {
    interval_ms_ = std::clamp(j.value("heartbeat_ms", 1000), 50, 60000);
    readAnswer(j, request, revoked_, live_);
  }
  return interval_ms_;
}

void AllocatorLink::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    sendReleased(lock);  // first: shares free at once
    uint64_t request = ++requests_;
    wake_ = false;
    std::string beat = heartbeat();
    lock.unlock();
    std::string path = registered_ ? "/v1/servers/" + name_ + "/heartbeat" : "/v1/servers";
    int wait_ms = answered(post(path, registered_ ? beat : registration_), path, request);
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return stop_ || wake_ || !released_.empty(); });
  }
}

}  // namespace gpool::server
