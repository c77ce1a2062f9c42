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
#include <thread>
#include <vector>

#include "lease_token.h"
#include "signed_request.h"

using nlohmann::json;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  CLI::App app{"gpool_bench_allocator: load for gpool-allocator (see bench/allocator.sh)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later flags override the script's
  std::string url = "http://127.0.0.1:7430", key_file;
  int servers = 125, gpus = 8, threads = 4, rate = 1000, seconds = 10, queues = 0;
  double hold_s = 1.0, wait_s = 0;
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
  std::string order;
  app.add_option("--order", order, "the pool's order (issue 15): fifo, shortest-first, least-attained or max-min; requests "
                                   "then carry estimates and job names, and the pool moves jobs (moves_per_hour = 60)");
  int round_s = 0;
  app.add_option("--round", round_s, "the pool's rounds, in seconds (issue 15; 0: none, or max-min's 6 minutes): every "
                                     "round decides again which leases run, and requests are restartable")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  app.add_option("--wait", wait_s, "seconds a request waits in the queue (0: refused when nothing fits)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::string key = gpool::token::loadKey(key_file, false);

  auto signedPost = [&](httplib::Client& c, const std::string& path, const std::string& body) {
    httplib::Headers h;
    for (auto& [name, value] : gpool::token::signRequest(key, "POST", path, body)) h.emplace(name, value);
    return c.Post(path.c_str(), h, body, "application/json");
  };
  // Each simulated server has its own key, enrolled by the admin, and signs its requests with it.
  std::vector<gpool::token::Ed25519Key> server_keys;
  auto serverPost = [&](httplib::Client& c, int s, const std::string& path, const std::string& body) {
    httplib::Headers h;
    for (auto& [name, value] : gpool::token::signRequest(server_keys[static_cast<size_t>(s)], "bench" + std::to_string(s), "POST", path, body))
      h.emplace(name, value);
    return c.Post(path.c_str(), h, body, "application/json");
  };
  {
    httplib::Client c(url);
    for (int s = 0; s < servers; ++s) {
      server_keys.push_back(gpool::token::Ed25519Key::generate());
      std::string path = "/v1/servers/bench" + std::to_string(s) + "/key", pem = server_keys.back().publicPem();
      httplib::Headers h;
      for (auto& [name, value] : gpool::token::signRequest(key, "PUT", path, pem)) h.emplace(name, value);
      if (auto r = c.Put(path.c_str(), h, pem, "application/x-pem-file"); !r || r->status != 200) {
        std::fprintf(stderr, "enrolling server %d failed: %s\n", s, r ? r->body.c_str() : httplib::to_string(r.error()).c_str());
        return 1;
      }
      json g = json::array();
      for (int i = 0; i < gpus; ++i)
        g.push_back({{"index", i}, {"uuid", "GPU-bench-" + std::to_string(s) + "-" + std::to_string(i)}, {"model", "H100"},
                     {"memory", 80ull << 30}, {"sms", 132}});
      auto r = serverPost(c, s, "/v1/servers", json{{"name", "bench" + std::to_string(s)}, {"address", "10.0.0.1:7420"}, {"gpus", g}}.dump());
      if (!r || r->status != 200) {
        std::fprintf(stderr, "registering server %d failed: %s\n", s, r ? r->body.c_str() : httplib::to_string(r.error()).c_str());
        return 1;
      }
    }
  }
  // The simulated users: service accounts u0..u49, since the allocator knows who asks (issue 11).
  std::vector<std::string> user_keys;
  {
    httplib::Client c(url);
    for (int u = 0; u < 50; ++u) {
      auto r = signedPost(c, "/v1/service-accounts", json{{"name", "u" + std::to_string(u)}, {"rotate", false}}.dump());
      if (!r || r->status != 201) {
        std::fprintf(stderr, "creating service account u%d failed: %s\n", u, r ? r->body.c_str() : httplib::to_string(r.error()).c_str());
        return 1;
      }
      user_keys.push_back(json::parse(r->body)["key"].get<std::string>());
    }
  }
  if (round_s > 0 && order.empty()) order = "fifo";
  if (queues > 0 || !order.empty()) {  // guarantees, borrowing and preemption (issue 14); orders (issue 15)
    std::string policy = "[settings]\npreemption_grace = \"1s\"\nlease_ttl = \"5s\"\n";
    if (!order.empty()) policy += "[pools.default]\norder = \"" + order + "\"\nmoves_per_hour = 60\n";
    if (round_s > 0) policy += "round = \"" + std::to_string(round_s) + "s\"\n";
    for (int q = 0; q < queues; ++q) {
      std::string members;
      for (int u = q; u < 50; u += queues) members += (members.empty() ? "\"u" : ", \"u") + std::to_string(u) + "\"";
      double share = queues == 1 ? 0.9 : q == 0 ? 0.5 : 0.4 / (queues - 1);  // q0 asks less than its guarantee
      policy += "[queues.q" + std::to_string(q) + "]\nguarantee = { gpus = " + std::to_string(share * servers * gpus) +
                " }\nweight = " + std::to_string(q + 1) + "\nmembers = [" + members + "]\n";
    }
    httplib::Client c(url);
    httplib::Headers h;
    for (auto& [name, value] : gpool::token::signRequest(key, "PUT", "/v1/policy", policy)) h.emplace(name, value);
    if (auto r = c.Put("/v1/policy", h, policy, "application/toml"); !r || r->status != 200) {
      std::fprintf(stderr, "setting the queues failed: %s\n", r ? r->body.c_str() : httplib::to_string(r.error()).c_str());
      return 1;
    }
  }
  std::atomic<bool> stop{false};
  std::thread heartbeats([&] {  // every server, every second
    httplib::Client c(url);
    while (!stop) {
      auto start = Clock::now();
      for (int s = 0; s < servers && !stop; ++s) serverPost(c, s, "/v1/servers/bench" + std::to_string(s) + "/heartbeat", "");
      std::this_thread::sleep_until(start + std::chrono::seconds(1));
    }
  });

  std::mutex mu;
  std::vector<double> latencies;
  std::atomic<uint64_t> granted{0}, queued{0}, refused{0}, errors{0}, releases{0};
  auto begin = Clock::now();
  auto end = begin + std::chrono::seconds(seconds);
  std::vector<std::thread> clients;
  for (int t = 0; t < threads; ++t)
    clients.emplace_back([&, t] {
      httplib::Client c(url);
      c.set_keep_alive(true);
      c.set_tcp_nodelay(true);
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
      const double fractions[] = {1.0, 0.5, 0.25};
      std::deque<std::pair<Clock::time_point, json>> held;  // (release time, the grant: its id and lease key)
      auto release = [&](const json& lease) {
        httplib::Headers h{{"X-Gpool-Lease-Key", lease["lease_key"].get<std::string>()}};
        auto r = c.Delete(("/v1/leases/" + lease["id"].get<std::string>()).c_str(), h);
        if (r && r->status == 200) ++releases;
      };
      std::vector<double> mine;
      auto interval = std::chrono::duration<double>(static_cast<double>(threads) / rate);
      auto next = begin + std::chrono::duration_cast<Clock::duration>(interval * (static_cast<double>(t) / threads));
      while (next < end) {
        while (!held.empty() && held.front().first <= Clock::now()) {
          release(held.front().second);
          held.pop_front();
        }
        std::this_thread::sleep_until(next);
        json req = {{"p", fractions[rng() % 3]}, {"n", 1 + (rng() % 8 == 0)}, {"wait", wait_s}};
        if (!order.empty()) req["estimate_s"] = 60.0 * (1 + rng() % 600), req["job"] = "j" + std::to_string(rng() % 2000);
        if (round_s > 0) req["restartable"] = true;
        httplib::Headers as_user{{"Authorization", "Bearer " + user_keys[rng() % user_keys.size()]}};
        auto sent = Clock::now();
        auto r = c.Post("/v1/leases", as_user, req.dump(), "application/json");
        mine.push_back(std::chrono::duration<double>(Clock::now() - sent).count());
        if (!r) ++errors;
        else if (r->status == 201) {
          ++granted;
          held.emplace_back(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(hold_s)),
                            json::parse(r->body));
        } else if (r->status == 202) ++queued;
        else if (r->status == 409 || r->status == 422) ++refused;
        else ++errors;
        next += std::chrono::duration_cast<Clock::duration>(interval);
      }
      for (auto& [when, lease] : held) release(lease);
      std::lock_guard lock(mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  for (auto& c : clients) c.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
  stop = true;
  heartbeats.join();

  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double q) { return latencies.empty() ? 0.0 : latencies[std::min(latencies.size() - 1, static_cast<size_t>(q * latencies.size()))] * 1e3; };
  uint64_t requests = latencies.size();
  std::printf("allocator_gpus %d\n", servers * gpus);
  std::printf("lease_requests %llu\n", static_cast<unsigned long long>(requests));
  std::printf("request_rate_per_s %.0f\n", requests / elapsed);
  std::printf("lease_ops_per_s %.0f\n", (requests + releases) / elapsed);
  std::printf("granted %llu queued %llu refused_full %llu errors %llu releases %llu\n", (unsigned long long)granted.load(),
              (unsigned long long)queued.load(), (unsigned long long)refused.load(), (unsigned long long)errors.load(),
              (unsigned long long)releases.load());
  std::printf("request_latency_ms p50 %.3f p99 %.3f p99.9 %.3f max %.3f\n", pct(0.5), pct(0.99), pct(0.999),
              latencies.empty() ? 0.0 : latencies.back() * 1e3);
  httplib::Client c(url);
  if (auto m = c.Get("/metrics"); m && m->status == 200) {
    std::printf("--- allocator's own grant-or-queue decision histogram (under its lock; the store write its answer waits for is not in it) ---\n");
    std::istringstream in(m->body);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("gpool_grant_decision", 0) == 0 || line.rfind("gpool_leases_preempted_total", 0) == 0 ||
          line.rfind("gpool_leases_rotated_total", 0) == 0 ||
          line.rfind("gpool_lease_requests_total", 0) == 0 || line.rfind("gpool_store_", 0) == 0)
        std::printf("%s\n", line.c_str());
  }
  return errors ? 1 : 0;
}
