// Drives a running gpool-allocator over HTTP the way a large pool would: S simulated servers with G
// GPUs each register and heartbeat (signed with the lease key), and client threads request leases at a
// fixed total rate (open loop), hold the granted ones for a while, and release them. Prints the
// client-observed latency of lease requests (p50/p99/p99.9), operations per second and the outcomes.
#include <CLI/CLI.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpool/allocator/lease_token.h"
#include "gpool/allocator/signed_request.h"

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::string failure(const httplib::Result& r) { return r ? r->body : httplib::to_string(r.error()); }

// The load's settings (its command line).
struct Settings {
  std::string url = "http://127.0.0.1:7430", key_file, order;
  int servers = 125, gpus = 8, threads = 4, rate = 1000, seconds = 10, queues = 0, round_s = 0;
  double hold_s = 1.0, wait_s = 0;

  void declare(CLI::App& app) {
    app.add_option("--allocator", url)->capture_default_str();
    app.add_option("--key-file", key_file, "the allocator's admin key (to enroll the simulated servers and their accounts)")->required();
    app.add_option("--servers", servers)->capture_default_str();
    app.add_option("--gpus-per-server", gpus)->capture_default_str();
    app.add_option("--threads", threads, "client threads")->capture_default_str();
    app.add_option("--rate", rate, "lease requests per second, all threads together")->capture_default_str();
    app.add_option("--seconds", seconds, "measured duration")->capture_default_str();
    app.add_option("--hold", hold_s, "seconds a granted lease is held before its release")->capture_default_str();
    app.add_option("--queues", queues, "queues with guarantees (0: none): q0 is guaranteed half the GPUs, the others 40% "
                                       "together; weights 1, 2, ...; users spread evenly over them, so q0 takes back what "
                                       "the others borrow (preemption grace 1 s)")
        ->capture_default_str();
    app.add_option("--order", order, "the pool's order (issue 15): fifo, shortest-first, least-attained or max-min; requests "
                                     "then carry estimates and job names, and the pool moves jobs (moves_per_hour = 60)");
    app.add_option("--round", round_s, "the pool's rounds, in seconds (issue 15; 0: none, or max-min's 6 minutes): every "
                                       "round decides again which leases run, and requests are restartable")
        ->capture_default_str()
        ->check(CLI::Range(0, 3600));
    app.add_option("--wait", wait_s, "seconds a request waits in the queue (0: refused when nothing fits)")->capture_default_str();
  }
};

class Load {
 public:
  Load(Settings s) : s_(std::move(s)), key_(gpool::token::loadKey(s_.key_file, false)) {
    if (s_.round_s > 0 && s_.order.empty()) s_.order = "fifo";
  }

  // The allocator's cluster: simulated servers, enrolled and registered; users; the policy. False (after
  // saying why) when the allocator refused a step.
  bool setUp() { return enrollServers() && makeUsers() && setPolicy(); }

  // Requests leases from every client thread at the set rate, while every server heartbeats.
  void run() {
    std::atomic<bool> stop{false};
    std::thread heartbeats([&] { heartbeat(stop); });
    begin_ = Clock::now();
    std::vector<std::thread> clients;
    for (int t = 0; t < s_.threads; ++t) clients.emplace_back([this, t] { client(t); });
    for (auto& c : clients) c.join();
    elapsed_s_ = std::chrono::duration<double>(Clock::now() - begin_).count();
    stop = true;
    heartbeats.join();
  }

  // The client-side figures, and the allocator's own decision histogram. False when requests failed.
  bool report();

 private:
  httplib::Result adminSend(httplib::Client& c, const char* method, const std::string& path, const std::string& body,
                            const char* type) {
    httplib::Headers h;
    for (auto& [name, value] : gpool::token::signRequest(key_, method, path, body)) h.emplace(name, value);
    return std::string(method) == "PUT" ? c.Put(path.c_str(), h, body, type) : c.Post(path.c_str(), h, body, type);
  }
  // Each simulated server has its own key, enrolled by the admin, and signs its requests with it.
  httplib::Result serverPost(httplib::Client& c, int s, const std::string& path, const std::string& body) {
    httplib::Headers h;
    for (auto& [name, value] : gpool::token::signRequest(server_keys_[static_cast<size_t>(s)], "bench" + std::to_string(s), "POST", path, body))
      h.emplace(name, value);
    return c.Post(path.c_str(), h, body, "application/json");
  }
  bool enrollServers();
  bool makeUsers();
  bool setPolicy();
  void heartbeat(const std::atomic<bool>& stop);
  void client(int t);
  json leaseRequest(std::mt19937& rng) const;

  Settings s_;
  std::string key_;
  std::vector<gpool::token::Ed25519Key> server_keys_;
  std::vector<std::string> user_keys_;  // the simulated users: service accounts u0..u49
  Clock::time_point begin_;
  double elapsed_s_ = 0;
  std::mutex mu_;
  std::vector<double> latencies_;
  std::atomic<uint64_t> granted_{0}, queued_{0}, refused_{0}, errors_{0}, releases_{0};
};

bool Load::enrollServers() {
  httplib::Client c(s_.url);
  for (int s = 0; s < s_.servers; ++s) {
    server_keys_.push_back(gpool::token::Ed25519Key::generate());
    std::string path = "/v1/servers/bench" + std::to_string(s) + "/key";
    if (auto r = adminSend(c, "PUT", path, server_keys_.back().publicPem(), "application/x-pem-file"); !r || r->status != 200) {
      std::fprintf(stderr, "enrolling server %d failed: %s\n", s, failure(r).c_str());
      return false;
    }
    json g = json::array();
    for (int i = 0; i < s_.gpus; ++i)
      g.push_back({{"index", i}, {"uuid", "GPU-bench-" + std::to_string(s) + "-" + std::to_string(i)}, {"model", "H100"},
                   {"memory", 80ull << 30}, {"sms", 132}});
    auto r = serverPost(c, s, "/v1/servers", json{{"name", "bench" + std::to_string(s)}, {"address", "10.0.0.1:7420"}, {"gpus", g}}.dump());
    if (!r || r->status != 200) {
      std::fprintf(stderr, "registering server %d failed: %s\n", s, failure(r).c_str());
      return false;
    }
  }
  return true;
}

// The simulated users are service accounts, since the allocator knows who asks (issue 11).
bool Load::makeUsers() {
  httplib::Client c(s_.url);
  for (int u = 0; u < 50; ++u) {
    auto r = adminSend(c, "POST", "/v1/service-accounts", json{{"name", "u" + std::to_string(u)}, {"rotate", false}}.dump(), "application/json");
    if (!r || r->status != 201) {
      std::fprintf(stderr, "creating service account u%d failed: %s\n", u, failure(r).c_str());
      return false;
    }
    user_keys_.push_back(json::parse(r->body)["key"].get<std::string>());
  }
  return true;
}

// Guarantees, borrowing and preemption (issue 14); orders and rounds (issue 15).
bool Load::setPolicy() {
  if (s_.queues == 0 && s_.order.empty()) return true;
  std::string policy = "[settings]\npreemption_grace = \"1s\"\nlease_ttl = \"5s\"\n";
  if (!s_.order.empty()) policy += "[pools.default]\norder = \"" + s_.order + "\"\nmoves_per_hour = 60\n";
  if (s_.round_s > 0) policy += "round = \"" + std::to_string(s_.round_s) + "s\"\n";
  for (int q = 0; q < s_.queues; ++q) {
    std::string members;
    for (int u = q; u < 50; u += s_.queues) members += (members.empty() ? "\"u" : ", \"u") + std::to_string(u) + "\"";
    double share = s_.queues == 1 ? 0.9 : q == 0 ? 0.5 : 0.4 / (s_.queues - 1);  // q0 asks less than its guarantee
    policy += "[queues.q" + std::to_string(q) + "]\nguarantee = { gpus = " + std::to_string(share * s_.servers * s_.gpus) +
              " }\nweight = " + std::to_string(q + 1) + "\nmembers = [" + members + "]\n";
  }
  httplib::Client c(s_.url);
  if (auto r = adminSend(c, "PUT", "/v1/policy", policy, "application/toml"); !r || r->status != 200) {
    std::fprintf(stderr, "setting the queues failed: %s\n", failure(r).c_str());
    return false;
  }
  return true;
}

void Load::heartbeat(const std::atomic<bool>& stop) {  // every server, every second
  httplib::Client c(s_.url);
  while (!stop) {
    auto start = Clock::now();
    for (int s = 0; s < s_.servers && !stop; ++s) serverPost(c, s, "/v1/servers/bench" + std::to_string(s) + "/heartbeat", "");
    std::this_thread::sleep_until(start + std::chrono::seconds(1));
  }
}

json Load::leaseRequest(std::mt19937& rng) const {
  const double fractions[] = {1.0, 0.5, 0.25};
  json req = {{"p", fractions[rng() % 3]}, {"n", 1 + (rng() % 8 == 0)}, {"wait", s_.wait_s}};
  if (!s_.order.empty()) req["estimate_s"] = 60.0 * (1 + rng() % 600), req["job"] = "j" + std::to_string(rng() % 2000);
  if (s_.round_s > 0) req["restartable"] = true;
  return req;
}

// Client thread `t`: its share of the requests, open loop, each granted lease released `hold_s` later.
void Load::client(int t) {
  httplib::Client c(s_.url);
  c.set_keep_alive(true);
  c.set_tcp_nodelay(true);
  std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
  std::deque<std::pair<Clock::time_point, json>> held;  // (release time, the grant: its id and lease key)
  auto release = [&](const json& lease) {
    httplib::Headers h{{"X-Gpool-Lease-Key", lease["lease_key"].get<std::string>()}};
    auto r = c.Delete(("/v1/leases/" + lease["id"].get<std::string>()).c_str(), h);
    if (r && r->status == 200) ++releases_;
  };
  std::vector<double> mine;
  const auto end = begin_ + std::chrono::seconds(s_.seconds);
  auto interval = std::chrono::duration<double>(static_cast<double>(s_.threads) / s_.rate);
  auto next = begin_ + std::chrono::duration_cast<Clock::duration>(interval * (static_cast<double>(t) / s_.threads));
  while (next < end) {
    while (!held.empty() && held.front().first <= Clock::now()) {
      release(held.front().second);
      held.pop_front();
    }
    std::this_thread::sleep_until(next);
    json req = leaseRequest(rng);
    httplib::Headers as_user{{"Authorization", "Bearer " + user_keys_[rng() % user_keys_.size()]}};
    auto sent = Clock::now();
    auto r = c.Post("/v1/leases", as_user, req.dump(), "application/json");
    mine.push_back(std::chrono::duration<double>(Clock::now() - sent).count());
    if (!r) ++errors_;
    else if (r->status == 201) {
      ++granted_;
      held.emplace_back(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s_.hold_s)),
                        json::parse(r->body));
    } else if (r->status == 202) ++queued_;
    else if (r->status == 409 || r->status == 422) ++refused_;
    else ++errors_;
    next += std::chrono::duration_cast<Clock::duration>(interval);
  }
  for (auto& [when, lease] : held) release(lease);
  std::lock_guard lock(mu_);
  latencies_.insert(latencies_.end(), mine.begin(), mine.end());
}

bool Load::report() {
  std::vector<double>& l = latencies_;
  std::sort(l.begin(), l.end());
  auto pct = [&](double q) { return l.empty() ? 0.0 : l[std::min(l.size() - 1, static_cast<size_t>(q * l.size()))] * 1e3; };
  uint64_t requests = l.size();
  std::printf("allocator_gpus %d\n", s_.servers * s_.gpus);
  std::printf("lease_requests %llu\n", static_cast<unsigned long long>(requests));
  std::printf("request_rate_per_s %.0f\n", requests / elapsed_s_);
  std::printf("lease_ops_per_s %.0f\n", (requests + releases_) / elapsed_s_);
  std::printf("granted %llu queued %llu refused_full %llu errors %llu releases %llu\n", (unsigned long long)granted_.load(),
              (unsigned long long)queued_.load(), (unsigned long long)refused_.load(), (unsigned long long)errors_.load(),
              (unsigned long long)releases_.load());
  std::printf("request_latency_ms p50 %.3f p99 %.3f p99.9 %.3f max %.3f\n", pct(0.5), pct(0.99), pct(0.999),
              l.empty() ? 0.0 : l.back() * 1e3);
  httplib::Client c(s_.url);
  if (auto m = c.Get("/metrics"); m && m->status == 200) {
    std::printf("--- allocator's own grant-or-queue decision histogram (under its lock; the store write its answer waits for is not in it) ---\n");
    std::istringstream in(m->body);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("gpool_grant_decision", 0) == 0 || line.rfind("gpool_leases_preempted_total", 0) == 0 ||
          line.rfind("gpool_leases_rotated_total", 0) == 0 ||
          line.rfind("gpool_lease_requests_total", 0) == 0 || line.rfind("gpool_store_", 0) == 0)
        std::printf("%s\n", line.c_str());
  }
  return errors_ == 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpool_bench_allocator: load for gpool-allocator (see bench/allocator.sh)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later flags override the script's
  Settings settings;
  settings.declare(app);
  CLI11_PARSE(app, argc, argv);
  Load load(std::move(settings));
  if (!load.setUp()) return 1;
  load.run();
  return load.report() ? 0 : 1;
}
