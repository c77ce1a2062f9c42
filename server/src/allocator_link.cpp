#include "allocator_link.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "allocator_connection.h"
#include "gpool/printable.h"
#include "lease_token.h"
#include "signed_request.h"

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

void AllocatorLink::loop() {
  bool registered = false;
  int interval_ms = 1000, backoff_ms = 500;
  std::unique_lock lock(mu_);
  while (!stop_) {
    while (!released_.empty()) {  // first: shares free at once
      std::string lease = released_.front();
      lock.unlock();
      auto r = post("/v1/servers/" + name_ + "/released", nlohmann::json{{"lease", lease}}.dump());
      lock.lock();
      if (!r) break;  // retried after the next wait
      released_.pop_front();
    }
    uint64_t request = ++requests_;
    wake_ = false;
    nlohmann::json launched = nlohmann::json::object(), use = nlohmann::json::object();
    for (const auto& [lease, from] : lease_sources_) {
      uint64_t memory = 0;
      launched[lease] = from.launched();
      double busy_s = 0, held_s = 0;
      for (const auto& b : from.memory) memory = addAtMost(memory, b->used());
      for (const auto& p : from.paces) busy_s += secondsOf(p->busyNs()), held_s += secondsOf(p->waitedNs());
      use[lease] = {{"memory", memory}, {"device_s", std::min(busy_s, kMostSeconds)}, {"held_s", std::min(held_s, kMostSeconds)}};
    }
    std::string beat = nlohmann::json{{"serving", serving_}, {"launches", launched}, {"use", use}}.dump();
    lock.unlock();
    std::string path = registered ? "/v1/servers/" + name_ + "/heartbeat" : "/v1/servers";
    auto r = post(path, registered ? beat : registration_);
    int wait_ms = interval_ms;
    if (!r) {
      spdlog::warn("allocator {} unreachable ({}{}); retrying in {} ms", replicas_->all(), httplib::to_string(r.error()),
                   r.error() == httplib::Error::SSLServerVerification ? ": its certificate does not verify; give its CA with --allocator-ca" : "",
                   backoff_ms);
      wait_ms = backoff_ms;
      // One replica: back off to 10 s. Several: a failover is under way or soon over; keep asking often,
      // so that the new leader hears from this server well within its timeout.
      backoff_ms = std::min(backoff_ms * 2, replicas_->size() > 1 ? 500 : 10000);
    } else if (r->status == 404 && registered) {
      spdlog::warn("the allocator does not know this server (restarted without its database?); registering again");
      registered = false;
      wait_ms = 0;
    } else if (!token::standbyLeader(r->status, r->body).empty()) {  // a failover: soon over
      spdlog::warn("no allocator replica of {} leads yet; asking again in 500 ms", replicas_->all());
      wait_ms = 500;
    } else if (r->status != 200) {
      auto j = nlohmann::json::parse(r->body, nullptr, false);
      std::string why = j.is_object() && j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>() : r->body;
      spdlog::error("allocator refused {}: {} {} (retrying in {} ms)", path, r->status, gpool::printable(why), backoff_ms);
      wait_ms = backoff_ms;
      backoff_ms = std::min(backoff_ms * 2, 10000);
    } else {
      backoff_ms = 500;
      auto j = nlohmann::json::parse(r->body, nullptr, false);
      if (!registered) spdlog::info("registered with allocator {} as {}", replicas_->url(), name_);
      registered = true;
      if (j.is_object()) {
        interval_ms = std::clamp(j.value("heartbeat_ms", 1000), 50, 60000);
        readAnswer(j, request, revoked_, live_);
      }
      wait_ms = interval_ms;
    }
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return stop_ || wake_ || !released_.empty(); });
  }
}

}  // namespace gpool::server
