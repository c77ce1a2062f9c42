// gpool status and gpool usage: the allocator's status document and its accounting, as tables (or JSON).
// Every name shown comes from the allocator's records: printed with control characters escaped.
#include "status_report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "cli_common.h"
#include "gpool/allocator/units.h"
#include "gpool/printable.h"

namespace gpool::cli {
namespace {

using nlohmann::json;

std::string show(const json& v) { return gpool::printable(v.get<std::string>()); }

std::string gib(uint64_t b) {
  std::ostringstream o;
  o.precision(3);
  o << b / 1073741824.0 << " GiB";
  return o.str();
}

std::string percent(const json& fraction) {
  return std::to_string(static_cast<int>(std::lround(fraction.get<double>() * 100))) + "%";
}

void printServers(const json& servers) {
  std::printf("%-16s %-22s %-10s %-6s %s\n", "SERVER", "ADDRESS", "POOL", "STATE", "GPUS");
  for (const auto& srv : servers)
    std::printf("%-16s %-22s %-10s %-6s %zu\n", show(srv["name"]).c_str(), show(srv["address"]).c_str(), show(srv["pool"]).c_str(),
                !srv["up"].get<bool>() ? "down" : srv["drain"].get<bool>() ? "drain" : "up", srv["gpus"].size());
}

// Each GPU's type, model and how much of it is leased; under them, the shares that leases which ended
// still hold (counted in IN USE) until their last worker there ends.
void printGpus(const json& servers) {
  std::printf("\n%-20s %-10s %-28s %-10s %-8s %s\n", "GPU", "TYPE", "MODEL", "MEMORY", "IN USE", "MEMORY LEASED");
  for (const auto& srv : servers)
    for (const auto& g : srv["gpus"])
      std::printf("%-20s %-10s %-28s %-10s %-8s %s\n", (show(srv["name"]) + ":" + std::to_string(g["index"].get<int>())).c_str(),
                  show(g.value("type", json(""))).c_str(), show(g["model"]).c_str(), gib(g["memory"]).c_str(),
                  percent(g["used_fraction"]).c_str(), gib(g["used_memory"]).c_str());
  for (const auto& srv : servers)
    for (const auto& d : srv.value("ended_leases_held", json::array()))
      std::printf("  %s:%d: %s held by ended lease %s until its last worker there ends\n", show(srv["name"]).c_str(),
                  d["device"].get<int>(), percent(d["fraction"]).c_str(), show(d["lease"]).c_str());
}

// Under a lease's line, what its servers measured of it: memory held, and for shares below a whole GPU the
// device time its kernels took and the time its launches waited for its share.
void printUse(const json& u) {
  const double device_s = u.value("device_seconds", 0.0), held_s = u.value("held_back_seconds", 0.0);
  std::printf("%-26s uses %s", "", gib(static_cast<uint64_t>(u.value("memory", 0.0))).c_str());
  if (device_s > 0 || held_s > 0) {
    std::printf("; its kernels ran %.1f s on the GPU", device_s);
    if (held_s > 0) std::printf(" and waited %.1f s for its share", held_s);
  }
  std::printf("\n");
}

// A lease's times: notice, with when its GPUs are revoked; when its time limit ends it; how long it has
// been idle, where its pool reclaims idle leases (`idle_timeout_s`, 0: it does not).
std::string leaseTimes(const json& l, double idle_timeout_s) {
  std::string times;
  auto add = [&](const std::string& part) { times += (times.empty() ? "" : "; ") + part; };
  if (l.contains("notice") && l.contains("preempt_in_ms"))
    add(show(l["notice"]) + " notice: revoked in " + fmtDuration(l["preempt_in_ms"].get<double>() / 1000));
  if (l.contains("ends_in_ms") && (!l.contains("notice") || l["notice"] != "time-limit"))
    add("ends in " + fmtDuration(l["ends_in_ms"].get<double>() / 1000));
  double idle = l.value("idle_ms", 0.0) / 1000;
  if (idle_timeout_s > 0 && idle >= std::min(60.0, idle_timeout_s / 2))
    add("idle " + fmtDuration(idle) + " of " + fmtDuration(idle_timeout_s));
  return times;
}

void printLeases(const json& s) {
  std::printf("\n%-26s %-10s %s\n", "LEASE", "USER", "SHARES (its devices 0, 1...: server:GPU x fraction)");
  std::map<std::string, double> idle_timeout_s;  // pool → its idle_timeout (0: none)
  for (const auto& p : s.value("pools", json::array())) idle_timeout_s[p.value("name", "")] = p.value("idle_timeout_s", 0.0);
  for (const auto& l : s["leases"]) {
    std::string shares;
    for (const auto& sh : l["shares"])
      shares += (shares.empty() ? "" : ", ") + show(sh["server"]) + ":" + std::to_string(sh["device"].get<int>()) + " x " +
                gpool::allocator::formatNumber(sh["fraction"].get<double>());
    std::string times = leaseTimes(l, idle_timeout_s[l["request"].value("pool", "")]);
    std::printf("%-26s %-10s %s%s\n", show(l["id"]).c_str(), show(l["request"]["user"]).c_str(), shares.c_str(),
                times.empty() ? "" : ("  (" + times + ")").c_str());
    if (l.contains("use")) printUse(l["use"]);
  }
}

void printWaiting(const json& queue) {
  std::printf("\n%-4s %-26s %-10s %-14s %s\n", "POS", "REQUEST", "USER", "ASKS", "WAITING FOR");
  for (const auto& q : queue) {
    const json& r = q["request"];
    std::string asks = std::to_string(r["n"].get<int>()) + " x " + gpool::allocator::formatNumber(r["p"].get<double>());
    std::printf("%-4d %-26s %-10s %-14s %s\n", q["position"].get<int>(), show(q["id"]).c_str(), show(r["user"]).c_str(), asks.c_str(),
                gpool::printable(q.value("waiting_for", std::string())).c_str());
  }
}

}  // namespace

// The QUEUE table: each queue's guarantee, limit, weight, what it holds, borrows, and its waiting requests.
void printQueues(const json& queues) {
  auto gpus = [](const json& v) { return v.is_null() ? std::string("-") : gpool::allocator::formatNumber(v.get<double>()); };
  std::printf("%-20s %-14s %10s %8s %6s %8s %8s %7s\n", "QUEUE", "PARENT", "GUARANTEE", "LIMIT", "WEIGHT", "HOLDS", "BORROWS", "WAITING");
  for (const auto& q : queues)
    std::printf("%-20s %-14s %10s %8s %6s %8s %8s %7d\n", show(q["name"]).c_str(), show(q["parent"]).c_str(),
                gpus(q["guarantee_gpus"]).c_str(), gpus(q["limit_gpus"]).c_str(), gpus(q["weight"]).c_str(),
                gpus(q["held_gpus"]).c_str(), gpus(q["borrowed_gpus"]).c_str(), q["waiting"].get<int>());
}

int status(AllocatorClient& a, bool as_json) {
  json s = must(a, "GET", "/v1/status", Proof::kNone);
  if (as_json) {
    std::cout << s.dump(2) << "\n";
    return 0;
  }
  if (s.contains("leader") && s["leader"].is_string())  // replicas sharing an etcd store: the one that answered
    std::printf("allocator leader: %s (of the replicas sharing its store)\n\n", show(s["leader"]).c_str());
  printServers(s["servers"]);
  printGpus(s["servers"]);
  printLeases(s);
  if (s.contains("queues") && !s["queues"].empty()) {  // guaranteed shares (the policy's [queues])
    std::printf("\n");
    printQueues(s["queues"]);
  }
  printWaiting(s["queue"]);
  return 0;
}

// `gpool usage`: a table of GPU time per user and group since `since` ago.
int usage(AllocatorClient& a, const std::string& since, bool as_json) {
  const auto seconds = static_cast<int64_t>(durationSeconds("--since", since));
  int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  json u = must(a, "GET", "/v1/usage?from=" + std::to_string(std::max<int64_t>(0, now_s - seconds)), Proof::kNone);
  if (as_json) {
    std::printf("%s\n", u.dump(2).c_str());
    return 0;
  }
  std::printf("%-16s %-16s %7s %11s %17s\n", "USER", "GROUP", "LEASES", "GPU-HOURS", "GPU-MEM-GiB-HOURS");
  for (const auto& r : u["usage"])
    std::printf("%-16s %-16s %7d %11.3f %17.3f\n", show(r["user"]).c_str(), show(r["group"]).c_str(), r["leases"].get<int>(),
                r["gpu_hours"].get<double>(), r["memory_gib_hours"].get<double>());
  if (u["from"].get<int64_t>() < u["kept_since"].get<int64_t>())
    std::printf("(leases that ended more than %.0f hours ago are forgotten: the policy's ended_lease_retention)\n",
                static_cast<double>(now_s - u["kept_since"].get<int64_t>()) / 3600);
  return 0;
}

}  // namespace gpool::cli
