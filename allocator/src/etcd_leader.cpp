// Leader election among allocator replicas (etcd_leader.h).
#include "etcd_leader.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "store.h"

namespace gpool::allocator {

using nlohmann::json;

const std::string EtcdLeader::kKey = "/gpool/leader";

EtcdLeader::EtcdLeader(const std::string& url, EtcdAccess access) : etcd_(url, 2, access), url_(url), access_(std::move(access)) {}

EtcdLeader::~EtcdLeader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (keeper_.joinable()) keeper_.join();
  if (lease_ == 0) return;
  try {
    etcd_.call("/v3/lease/revoke", {{"ID", std::to_string(lease_)}});
  } catch (const StoreError&) {  // it lapses by itself
  }
}

std::string EtcdLeader::leaderSeen() {
  std::lock_guard lock(mu_);
  return seen_;
}

bool EtcdLeader::campaign(Campaign c) {
  while (!c.stop || !*c.stop) {
    try {
      if (tryToLead(c)) {
        keeper_ = std::thread([this, lost = std::move(c.lost), ttl = c.ttl_s] { keepAlive(lost, ttl); });
        return true;
      }
    } catch (const StoreError& e) {
      spdlog::warn("leader election: {}; trying again", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  return false;
}

// One round: while another leads, watch its key for up to a second; when none does, try to take it.
bool EtcdLeader::tryToLead(const Campaign& c) {
  json now = etcd_.call("/v3/kv/range", {{"key", etcdBase64(kKey)}});
  if (now.contains("kvs") && !now["kvs"].empty()) {
    std::string leader = etcdUnbase64(now["kvs"][0].value("value", ""));
    bool changed;
    {
      std::lock_guard lock(mu_);
      changed = leader != seen_;
      seen_ = leader;
    }
    if (changed && c.standing_by) c.standing_by(leader);
    int64_t from = std::stoll(now["header"].value("revision", "0")) + 1;
    bool gone = false;
    if (!etcd_.watch(kKey, from, 1000, [&](const json& answer) {
          for (const auto& e : answer["events"]) gone = gone || e.value("type", "") == "DELETE";
          return !gone;
        }))
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (!gone) return false;
  }
  json grant = etcd_.call("/v3/lease/grant", {{"TTL", c.ttl_s}});
  const int64_t id = std::stoll(grant.value("ID", "0"));
  json txn = etcd_.putIfAbsent(kKey, c.me, id);
  if (!txn.value("succeeded", false)) {  // another was quicker
    etcd_.call("/v3/lease/revoke", {{"ID", std::to_string(id)}});
    return false;
  }
  lease_ = id;
  revision_ = std::stoll(txn["header"].value("revision", "0"));
  return true;
}

// Renews the lease three times per time to live. When etcd says it lapsed, or no renewal got through for
// a whole time to live, this allocator no longer leads (another may have taken over meanwhile).
void EtcdLeader::keepAlive(std::function<void()> lost, int ttl_s) {
  EtcdClient etcd(url_, 1, access_);
  const auto every = std::chrono::milliseconds(ttl_s * 1000 / 3);
  auto renewed = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  while (!stop_cv_.wait_for(lock, every, [&] { return stop_; })) {
    lock.unlock();
    std::string why;
    try {
      json r = etcd.call("/v3/lease/keepalive", {{"ID", std::to_string(lease_)}});
      if (std::stoll(r.value("result", json::object()).value("TTL", "0")) > 0) renewed = std::chrono::steady_clock::now();
      else why = "etcd says its lease lapsed";
    } catch (const std::exception& e) {
      if (std::chrono::steady_clock::now() - renewed >= std::chrono::seconds(ttl_s)) why = std::string("its lease could not be renewed: ") + e.what();
    }
    lock.lock();
    if (!why.empty() && !stop_) {
      spdlog::critical("this allocator no longer leads: {}", why);
      lock.unlock();
      lost();
      return;
    }
  }
}

}  // namespace gpool::allocator
