#include "lease_watch.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <cstdio>

namespace gpool::cli {

using nlohmann::json;

LeaseWatch::LeaseWatch(std::unique_ptr<AllocatorClient> client, std::string id, int heartbeat_ms, Events events,
                       std::string progress_file)
    : a_(std::move(client)),
      id_(std::move(id)),
      every_ms_(std::max(100, heartbeat_ms)),
      events_(std::move(events)),
      progress_file_(std::move(progress_file)) {
  thread_ = std::thread([this] { loop(); });
}

LeaseWatch::~LeaseWatch() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool LeaseWatch::pause(int ms) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return done_; });
}

void LeaseWatch::loop() {
  using Clock = std::chrono::steady_clock;
  const std::string path = "/v1/leases/" + id_;
  auto next_beat = Clock::now() + std::chrono::milliseconds(every_ms_);
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (done_) return;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - Clock::now()).count();
    if (left <= 0) {
      next_beat = Clock::now() + std::chrono::milliseconds(every_ms_);
      auto [status, text] = a_->call("POST", path + "/heartbeat", Proof::kLease, heartbeatBody());
      reached(status, text);
      if (status != 0 && !see(status, text)) break;
      continue;
    }
    int wait_ms = static_cast<int>(std::clamp<int64_t>(left, 1, 5000));
    auto [status, text] = a_->call("GET", path + "?wait_ms=" + std::to_string(wait_ms), Proof::kLease);
    reached(status, text);
    if (status == 0 ? !pause(std::min(wait_ms, 500)) : !see(status, text)) break;  // (away: ask again soon)
  }
  while (pause(3600 * 1000)) {  // ended: nothing more to watch until stopped
  }
}

void LeaseWatch::reached(int status, const std::string& why) {
  using Clock = std::chrono::steady_clock;
  if (status == 0 && !away_since_) {  // one line while it is away (a failover, a restart), not one per try
    away_since_ = Clock::now();
    std::fprintf(stderr, "gpool: heartbeat: %s; retrying until it answers\n", why.c_str());
  } else if (status != 0 && away_since_) {
    double away_s = std::chrono::duration<double>(Clock::now() - *away_since_).count();
    std::fprintf(stderr, "gpool: heartbeat: the allocator answers again (after %.1fs)\n", away_s);
    away_since_.reset();
  }
}

std::string LeaseWatch::heartbeatBody() const {
  if (progress_file_.empty()) return "";
  std::ifstream in(progress_file_);
  double progress = -1;
  if (!(in >> progress) || !std::isfinite(progress) || progress < 0 || progress > 1e15) return "";  // none yet, or not a count
  return json{{"progress", progress}}.dump();
}

bool LeaseWatch::see(int status, const std::string& text) {
  json j = json::parse(text, nullptr, false);
  bool object = j.is_object();
  if (status == 410 || status == 404 || (object && j.value("state", "") == "ended")) {
    std::string why = object ? j.value("end_reason", j.value("error", text)) : text;
    if (events_.ended) events_.ended(why);
    return false;
  }
  if (status != 200 || !object) return true;
  if (const auto s = j.find("shares"); s != j.end() && s->is_array() && !s->empty() && s->at(0).contains("token") && *s != shares_) {
    shares_ = *s;
    if (events_.shares) events_.shares(shares_);
  }
  if (j.contains("preempt_in_ms") && j["preempt_in_ms"].is_number_integer()) {
    if (!noticed_ && events_.notice) events_.notice(j["preempt_in_ms"].get<int64_t>(), allocator::noticeFromName(j.value("notice", "")), j.value("preempted_for", ""));
    noticed_ = true;
  } else if (noticed_ && j.value("state", "") == "granted") {
    noticed_ = false;
    if (events_.withdrawn) events_.withdrawn();
  }
  return true;
}

}  // namespace gpool::cli
