// gpool: the command users and admins type. `gpool run` and `gpool lease` (launcher.h) lease GPUs from
// gpool-allocator and run a command on them; `gpool status` shows servers, GPUs, leases, queues and the
// wait queue; `gpool admin` changes policies and queues, drains servers, manages keys.
#include <CLI/CLI.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "allocator_client.h"
#include "cli_common.h"
#include "command_line.h"
#include "launcher.h"
#include "gpool/printable.h"
#include "lease_token.h"
#include "signed_request.h"
#include "policy.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using gpool::cli::AllocatorClient;
using gpool::cli::die;
using gpool::cli::env;
using gpool::cli::kExitAllocator;
using gpool::cli::kExitRefused;
using gpool::cli::kExitUsage;
using gpool::cli::markCommandStart;
using gpool::cli::must;
using gpool::cli::Proof;

// --- gpool status --------------------------------------------------------------------------------------
std::string gib(uint64_t b) {
  std::ostringstream o;
  o.precision(3);
  o << b / 1073741824.0 << " GiB";
  return o.str();
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

// The QUEUE table: each queue's guarantee, limit, weight, what it holds, borrows, and its waiting requests.
void printQueues(const json& queues) {
  auto show = [](const json& v) { return gpool::printable(v.get<std::string>()); };
  auto gpus = [](const json& v) { return v.is_null() ? std::string("-") : gpool::allocator::formatNumber(v.get<double>()); };
  std::printf("%-20s %-14s %10s %8s %6s %8s %8s %7s\n", "QUEUE", "PARENT", "GUARANTEE", "LIMIT", "WEIGHT", "HOLDS", "BORROWS", "WAITING");
  for (const auto& q : queues)
    std::printf("%-20s %-14s %10s %8s %6s %8s %8s %7d\n", show(q["name"]).c_str(), show(q["parent"]).c_str(),
                gpus(q["guarantee_gpus"]).c_str(), gpus(q["limit_gpus"]).c_str(), gpus(q["weight"]).c_str(),
                gpus(q["held_gpus"]).c_str(), gpus(q["borrowed_gpus"]).c_str(), q["waiting"].get<int>());
}

// gpool admin queue set: the settings given, as the TOML keys of a [queues.NAME] table (strings quoted
// as JSON writes them, which TOML reads alike).
struct QueueFlags {
  std::string name, parent, guarantee_memory, limit_memory;
  std::optional<double> guarantee, limit, weight;
  std::vector<std::string> members;

  std::string toml() const {
    auto quoted = [](const std::string& v) { return json(v).dump(); };
    auto quota = [&](const std::optional<double>& gpus, const std::string& memory) {
      std::string parts;
      if (gpus) parts += "gpus = " + json(*gpus).dump();
      if (!memory.empty()) parts += (parts.empty() ? "" : ", ") + std::string("memory = ") + quoted(memory);
      return "{ " + parts + " }";
    };
    std::string out;
    if (!parent.empty()) out += "parent = " + quoted(parent) + "\n";
    if (guarantee || !guarantee_memory.empty()) out += "guarantee = " + quota(guarantee, guarantee_memory) + "\n";
    if (limit || !limit_memory.empty()) out += "limit = " + quota(limit, limit_memory) + "\n";
    if (weight) out += "weight = " + json(*weight).dump() + "\n";
    if (!members.empty()) {
      std::string list;
      for (const auto& m : members) list += (list.empty() ? "" : ", ") + quoted(m);
      out += "members = [" + list + "]\n";
    }
    return out;
  }
};

// `gpool usage`: a table of GPU time per user and group since `since` ago.
int usage(AllocatorClient& a, const std::string& since, bool as_json) {
  int64_t seconds = 0;
  try {
    seconds = std::chrono::duration_cast<std::chrono::seconds>(gpool::allocator::parseDuration(since)).count();
  } catch (const std::exception& e) {
    die(kExitUsage, std::string("--since: ") + e.what());
  }
  int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  json u = must(a, "GET", "/v1/usage?from=" + std::to_string(std::max<int64_t>(0, now_s - seconds)), Proof::kNone);
  if (as_json) {
    std::printf("%s\n", u.dump(2).c_str());
    return 0;
  }
  std::printf("%-16s %-16s %7s %11s %17s\n", "USER", "GROUP", "LEASES", "GPU-HOURS", "GPU-MEM-GiB-HOURS");
  for (const auto& r : u["usage"])
    std::printf("%-16s %-16s %7d %11.3f %17.3f\n", gpool::printable(r["user"].get<std::string>()).c_str(),
                gpool::printable(r["group"].get<std::string>()).c_str(), r["leases"].get<int>(), r["gpu_hours"].get<double>(),
                r["memory_gib_hours"].get<double>());
  if (u["from"].get<int64_t>() < u["kept_since"].get<int64_t>())
    std::printf("(leases that ended more than %.0f hours ago are forgotten: the policy's ended_lease_retention)\n",
                static_cast<double>(now_s - u["kept_since"].get<int64_t>()) / 3600);
  return 0;
}

// `gpool release ID...`: each lease ended (or request withdrawn), or why not; the worst status of them.
int release(AllocatorClient& a, const std::vector<std::string>& ids) {
  int worst = 0;
  for (const std::string& id : ids) {
    if (!gpool::isPlainName(id)) die(kExitUsage, "'" + gpool::printable(id) + "' is not a lease id (gpool status lists them)");
    auto [st, text] = a.call("DELETE", "/v1/leases/" + id, Proof::kIdentity);
    if (st <= 0) die(kExitAllocator, text);  // unreachable, or no proof of who asks
    json r = json::parse(text, nullptr, false);
    if (st == 200) {
      std::printf("%s %s\n", id.c_str(), r.value("ended", false) ? "released" : "had already ended");
      continue;
    }
    std::string why = r.is_object() ? r.value("error", text) : text;
    std::fprintf(stderr, "gpool: %s: %s\n", id.c_str(), gpool::printable(why).c_str());
    worst = std::max(worst, st >= 500 ? kExitAllocator : kExitRefused);
  }
  return worst;
}

int status(AllocatorClient& a, bool as_json) {
  json s = must(a, "GET", "/v1/status", Proof::kNone);
  if (as_json) {
    std::cout << s.dump(2) << "\n";
    return 0;
  }
  // Every name shown comes from the allocator's records: printed with control characters escaped.
  auto show = [](const json& v) { return gpool::printable(v.get<std::string>()); };
  if (s.contains("leader") && s["leader"].is_string())  // replicas sharing an etcd store: the one that answered
    std::printf("allocator leader: %s (of the replicas sharing its store)\n\n", show(s["leader"]).c_str());
  std::printf("%-16s %-22s %-10s %-6s %s\n", "SERVER", "ADDRESS", "POOL", "STATE", "GPUS");
  for (const auto& srv : s["servers"])
    std::printf("%-16s %-22s %-10s %-6s %zu\n", show(srv["name"]).c_str(), show(srv["address"]).c_str(), show(srv["pool"]).c_str(),
                !srv["up"].get<bool>() ? "down" : srv["drain"].get<bool>() ? "drain" : "up", srv["gpus"].size());
  auto percent = [](const json& fraction) { return std::to_string(static_cast<int>(std::lround(fraction.get<double>() * 100))) + "%"; };
  std::printf("\n%-20s %-10s %-28s %-10s %-8s %s\n", "GPU", "TYPE", "MODEL", "MEMORY", "IN USE", "MEMORY LEASED");
  for (const auto& srv : s["servers"])
    for (const auto& g : srv["gpus"])
      std::printf("%-20s %-10s %-28s %-10s %-8s %s\n", (show(srv["name"]) + ":" + std::to_string(g["index"].get<int>())).c_str(),
                  show(g.value("type", json(""))).c_str(), show(g["model"]).c_str(), gib(g["memory"]).c_str(),
                  percent(g["used_fraction"]).c_str(),
                  gib(g["used_memory"]).c_str());
  for (const auto& srv : s["servers"])  // counted in IN USE above, by leases that ended
    for (const auto& d : srv.value("ended_leases_held", json::array()))
      std::printf("  %s:%d: %s held by ended lease %s until its last worker there ends\n", show(srv["name"]).c_str(),
                  d["device"].get<int>(), percent(d["fraction"]).c_str(), show(d["lease"]).c_str());
  std::printf("\n%-26s %-10s %s\n", "LEASE", "USER", "SHARES (its devices 0, 1...: server:GPU x fraction)");
  std::map<std::string, double> idle_timeout_s;  // pool → its idle_timeout (0: none)
  for (const auto& p : s.value("pools", json::array())) idle_timeout_s[p.value("name", "")] = p.value("idle_timeout_s", 0.0);
  for (const auto& l : s["leases"]) {
    std::string shares;
    for (const auto& sh : l["shares"])
      shares += (shares.empty() ? "" : ", ") + show(sh["server"]) + ":" + std::to_string(sh["device"].get<int>()) + " x " +
                gpool::allocator::formatNumber(sh["fraction"].get<double>());
    // Notice, with when its GPUs are revoked; when its time limit ends it; how long it has been idle, where
    // its pool reclaims idle leases.
    std::string times;
    if (l.contains("notice") && l.contains("preempt_in_ms"))
      times = show(l["notice"]) + " notice: revoked in " + gpool::cli::fmtDuration(l["preempt_in_ms"].get<double>() / 1000);
    if (l.contains("ends_in_ms") && (!l.contains("notice") || l["notice"] != "time-limit"))
      times += (times.empty() ? "" : "; ") + ("ends in " + gpool::cli::fmtDuration(l["ends_in_ms"].get<double>() / 1000));
    double timeout = idle_timeout_s[l["request"].value("pool", "")], idle = l.value("idle_ms", 0.0) / 1000;
    if (timeout > 0 && idle >= std::min(60.0, timeout / 2))
      times += (times.empty() ? "" : "; ") + ("idle " + gpool::cli::fmtDuration(idle) + " of " + gpool::cli::fmtDuration(timeout));
    std::printf("%-26s %-10s %s%s\n", show(l["id"]).c_str(), show(l["request"]["user"]).c_str(), shares.c_str(),
                times.empty() ? "" : ("  (" + times + ")").c_str());
    if (l.contains("use")) printUse(l["use"]);
  }
  if (s.contains("queues") && !s["queues"].empty()) {  // guaranteed shares (the policy's [queues])
    std::printf("\n");
    printQueues(s["queues"]);
  }
  std::printf("\n%-4s %-26s %-10s %-14s %s\n", "POS", "REQUEST", "USER", "ASKS", "WAITING FOR");
  for (const auto& q : s["queue"]) {
    const json& r = q["request"];
    std::string asks = std::to_string(r["n"].get<int>()) + " x " + gpool::allocator::formatNumber(r["p"].get<double>());
    std::printf("%-4d %-26s %-10s %-14s %s\n", q["position"].get<int>(), show(q["id"]).c_str(), show(r["user"]).c_str(), asks.c_str(),
                gpool::printable(q.value("waiting_for", std::string())).c_str());
  }
  return 0;
}

std::string readFile(const std::string& path) {
  if (path == "-") return std::string((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::ifstream f(path);
  if (!f) die(kExitUsage, "cannot read " + path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// gpool admin service-account ...: issue, rotate, list and delete service accounts' keys.
int serviceAccount(AllocatorClient& a, CLI::App& sub, const std::string& name, const std::vector<std::string>& groups,
                   const std::string& out_file) {
  if (sub.got_subcommand("list")) {
    json r = must(a, "GET", "/v1/service-accounts", Proof::kIdentity);
    std::printf("%-24s %s\n", "NAME", "GROUPS");
    for (const auto& acct : r["service_accounts"]) {
      std::string gs;
      for (const auto& g : acct["groups"]) gs += (gs.empty() ? "" : ",") + gpool::printable(g.get<std::string>());
      std::printf("%-24s %s\n", gpool::printable(acct["name"].get<std::string>()).c_str(), gs.c_str());
    }
    return 0;
  }
  if (sub.got_subcommand("delete")) {
    must(a, "DELETE", "/v1/service-accounts/" + name, Proof::kIdentity);
    std::printf("service account %s deleted: its key no longer works\n", name.c_str());
    return 0;
  }
  bool rotate = sub.got_subcommand("rotate");
  json r = must(a, "POST", "/v1/service-accounts", Proof::kIdentity, json{{"name", name}, {"groups", groups}, {"rotate", rotate}}.dump());
  std::string key = r.at("key");
  if (out_file.empty() || out_file == "-") {
    std::printf("%s\n", key.c_str());
  } else {
    int fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::write(fd, (key + "\n").data(), key.size() + 1) != static_cast<ssize_t>(key.size() + 1))
      die(kExitUsage, "cannot write " + out_file + ": " + std::strerror(errno) + " (the key was issued; rotate it and retry)");
    ::close(fd);
    std::fprintf(stderr, "gpool: %s's key written to %s (mode 0600); give it with GPOOL_SERVICE_KEY_FILE\n", name.c_str(), out_file.c_str());
  }
  return 0;
}

std::string firstLine(const std::string& path) {
  std::string text = readFile(path);
  return text.substr(0, text.find_first_of("\r\n"));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpool: run programs on pooled, remote, whole or fractional GPUs.\n"
               "The allocator is found at GPOOL_ALLOCATOR=http(s)://HOST:PORT or unix:PATH (or --allocator); with\n"
               "allocator replicas, list them all, comma-separated: gpool follows the one that leads.\n"
               "It knows who you are from MUNGE (munged on this host), from its local socket (unix:PATH), or from\n"
               "a service account's key (GPOOL_SERVICE_KEY_FILE); `gpool whoami` shows what it sees."};
  app.require_subcommand(1);
  std::string url = env("GPOOL_ALLOCATOR"), service_key_file = env("GPOOL_SERVICE_KEY_FILE"), munge_socket = env("GPOOL_MUNGE_SOCKET"),
              ca_file = env("GPOOL_CA_FILE");
  app.add_option("--allocator", url,
                 "allocator URL: http(s)://HOST:PORT (replicas: several, comma-separated) or unix:PATH (default: $GPOOL_ALLOCATOR)");
  app.add_option("--ca-file", ca_file, "PEM CA file that verifies an https:// allocator (default: $GPOOL_CA_FILE, else the system's)");
  app.add_option("--service-key-file", service_key_file, "act as the service account whose key FILE holds (default: $GPOOL_SERVICE_KEY_FILE)");
  app.add_option("--munge-socket", munge_socket, "munged's socket (default: $GPOOL_MUNGE_SOCKET, else munged's own)");

  auto* run_cmd = app.add_subcommand("run", "lease GPUs, run COMMAND on them, release them when it exits");
  run_cmd->footer(
      "Examples:\n"
      "  gpool run -p 0.5 -- python train.py          half a GPU\n"
      "  gpool run -n 2 -m 40GiB --wait 30m ./job.sh   two GPUs, 40 GiB each; give up after 30 min in the queue\n"
      "\n"
      "While GPUs are short, gpool waits and says what for. The command runs with gpool's libcuda.so.1 first\n"
      "on LD_LIBRARY_PATH and the lease in its environment (GPOOL_SHARES, GPOOL_LEASE_FILE, GPOOL_FRACTION,\n"
      "GPOOL_MEMORY, GPOOL_PREEMPT_FILE, GPOOL_PROGRESS_FILE): every CUDA program it starts, one after another\n"
      "or at once, uses the lease. Signals sent to gpool go on to the command. Processes the command leaves\n"
      "running get SIGTERM when it exits, and SIGKILL 10 s later; the lease is released when the last is gone.\n"
      "\n"
      "Exit status: the command's (128+N when signal N ended it); 2 bad usage, 3 refused, 4 --wait ran out,\n"
      "5 allocator unreachable or in error, 75 preempted without --requeue, 124 the time limit (--time) came.\n"
      "More: docs/user.md");
  auto* lease_cmd = app.add_subcommand(
      "lease", "hold a lease for another process: print it as one line of JSON (the GPOOL_* environment), heartbeat "
               "it until standard input closes, then release it. gpool's client library runs this when a program "
               "starts with GPOOL_ALLOCATOR set and no lease.");
  int n = 1;
  double p = 1.0, min_fraction = 0;
  bool requeue = false, non_preemptible = false;
  std::string m, wait = "1h", pool = "default", priority, user, group, gpu_types, kind, estimate, time_limit;
  std::vector<std::string> command;
  for (CLI::App* sub : {run_cmd, lease_cmd}) {
    sub->add_option("-n,--gpus", n, "number of GPUs")->capture_default_str()->check(CLI::Range(1, 1024));
    sub->add_option("-p,--fraction", p, "fraction of each GPU (one the pool offers, e.g. 1, 0.5, 0.25)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    sub->add_option("-m,--memory", m, "GPU memory per GPU, e.g. 16GiB (default: the fraction of the GPU's memory); "
                                      "allocations past it fail with out-of-memory");
    sub->add_option("--wait", wait, "how long to wait in the queue while GPUs are short (e.g. 30s, 10m; 0: not at "
                                    "all; forever: no limit)")
        ->capture_default_str();
    sub->add_option("--pool", pool, "pool to lease from")->capture_default_str();
    sub->add_option("--priority", priority, "priority class (default: the policy's default; the policy says who may use which)");
    sub->add_option("--group", group, "one of your groups to charge the lease to (quotas; default: your primary group)");
    sub->add_option("--user", user, "request the lease for another user (admins only; default: you)");
    sub->add_option("--min-fraction", min_fraction,
                    "elastic: when -p is not free, take any smaller fraction the pool offers down to this one (the "
                    "program reads what it got from GPOOL_FRACTION and cuMemGetInfo)")
        ->check(CLI::Range(0.0, 1.0));
    sub->add_option("--gpu-type", gpu_types,
                    "GPU types the command may run on, comma-separated (e.g. H100,A100; `gpool status` lists each GPU's "
                    "type; default: any)");
    sub->add_option("--kind", kind,
                    "what kind of job this is (a name in the policy's [job_kinds], which says how fast each kind runs on "
                    "each GPU type): it is placed on the fastest type with room");
    sub->add_option("--estimate", estimate,
                    "how long the job runs alone on its fastest GPU type (e.g. 2h): pools ordered shortest-first grant "
                    "shorter jobs first");
    sub->add_option("--time", time_limit,
                    "time limit (e.g. 2h): the lease ends this long after its grant, with notice as for preemption "
                    "(SIGTERM, then the policy's grace period); gpool run then exits with 124 (default: the pool's max_time, "
                    "if it has one)");
    sub->add_flag("--non-preemptible", non_preemptible,
                  "never preempt this lease to give a queue its guarantee back (it is then granted only within your "
                  "queue's guarantee)");
  }
  run_cmd->add_flag("--requeue", requeue,
                    "when the command is preempted (SIGTERM, then the policy's grace period), wait for GPUs again and "
                    "rerun it (GPOOL_RESTARTS counts the runs before, GPOOL_LAST_EXIT is the last one's status); "
                    "without it gpool exits with status 75");
  run_cmd->add_option("command", command, "the command and its arguments: gpool's options end where it begins (so its own, "
                                           "as in `python train.py -n 5`, stay its own); a `--` before it is optional")
      ->required();
  int notify_pid = 0;
  lease_cmd->add_option("--notify-pid", notify_pid,
                        "the process the lease is held for: on preemption notice it gets SIGTERM (after the file "
                        "$GPOOL_PREEMPT_FILE names is written), and SIGKILL when the GPUs are revoked (the client "
                        "library passes its own pid)")
      ->check(CLI::PositiveNumber);

  auto* release_cmd = app.add_subcommand(
      "release", "end leases (a queued request is withdrawn): your own, or anyone's for an admin. The command "
                 "running on one loses its GPUs; `gpool status` lists the leases");
  std::vector<std::string> release_ids;
  release_cmd->add_option("lease", release_ids, "lease ids (L...)")->required();
  bool as_json = false;
  auto* usage_cmd = app.add_subcommand("usage", "GPU time each user and group had (accounting), from live leases and the "
                                                 "ended ones the allocator keeps (the policy's ended_lease_retention)");
  std::string since = "168h";
  usage_cmd->add_option("--since", since, "how far back to count (e.g. 24h, 90m; at most 30 days)")->capture_default_str();
  usage_cmd->add_flag("--json", as_json, "print the allocator's answer");
  auto* status_cmd = app.add_subcommand("status", "servers, GPUs, shares, leases and the queue");
  status_cmd->add_flag("--json", as_json, "print the allocator's status document");
  auto* whoami = app.add_subcommand("whoami", "who the allocator takes you for: user, groups, how it knows, admin or not");

  auto* admin = app.add_subcommand("admin", "change partition policies, drain servers, manage service accounts (admins: "
                                            "the allocator's key, or a user the policy's access.admins names)");
  admin->require_subcommand(1);
  std::string key_file = env("GPOOL_KEY_FILE");
  admin->add_option("--key-file", key_file, "sign with the allocator's key file instead of proving who you are (default: $GPOOL_KEY_FILE)");
  auto* policy = admin->add_subcommand("policy", "show or replace the partition policy (TOML, see docs/admin.md)");
  policy->require_subcommand(1);
  policy->add_subcommand("show", "print the policy in force");
  std::string policy_file;
  auto* set = policy->add_subcommand("set", "replace the policy with TOML text given as an argument or on stdin (-)");
  set->add_option("toml", policy_file, "TOML text, or - for stdin")->required();
  auto* apply = policy->add_subcommand("apply", "check FILE, then replace the policy with it");
  apply->add_option("file", policy_file, "TOML policy file")->required()->check(CLI::ExistingFile);
  auto* drain = admin->add_subcommand("drain", "stop granting new shares on SERVER (running leases continue)");
  std::string server;
  bool undo = false;
  drain->add_option("server", server, "server name")->required();
  drain->add_flag("--undo", undo, "put the server back in service");
  auto* servers = admin->add_subcommand("server", "enroll a gpool-server's key (its requests are refused until then), or "
                                                  "unenroll it");
  servers->require_subcommand(1);
  std::string server_pub;
  auto* enroll = servers->add_subcommand("enroll", "enroll SERVER with the public key its --server-key made (FILE.pub)");
  enroll->add_option("server", server, "server name (gpool-server --name)")->required();
  enroll->add_option("public_key", server_pub, "the server's public key file (PEM)")->required()->check(CLI::ExistingFile);
  servers->add_subcommand("unenroll", "refuse SERVER's requests from now on")->add_option("server", server, "server name")->required();
  auto* accounts = admin->add_subcommand("service-account", "identities for programs without a user on a cluster host; "
                                                             "each has a key, shown once");
  accounts->require_subcommand(1);
  std::string account, key_out;
  std::vector<std::string> account_groups;
  for (auto [verb, help] : {std::pair{"create", "create NAME and print its key (or write it to -o FILE)"},
                            std::pair{"rotate", "give NAME a new key (the old one stops working at once)"}}) {
    auto* c = accounts->add_subcommand(verb, help);
    c->add_option("name", account, "service account name")->required();
    c->add_option("-g,--group", account_groups, "a group it belongs to (repeat; the first is charged for its leases)");
    c->add_option("-o,--output", key_out, "write the key to FILE (mode 0600) instead of printing it");
  }
  auto* queues = admin->add_subcommand("queue", "change the policy's queues at run time (guarantees, limits, weights, members; "
                                               "see docs/admin.md); the policy in force is rewritten without its comments");
  queues->require_subcommand(1);
  QueueFlags qf;
  auto* queue_set = queues->add_subcommand("set", "create queue NAME, or change the settings given (the others stay)");
  queue_set->add_option("name", qf.name, "queue name")->required();
  queue_set->add_option("--parent", qf.parent, "the queue it is part of");
  queue_set->add_option("--guarantee", qf.guarantee, "GPUs guaranteed (a sum of fractions)");
  queue_set->add_option("--guarantee-memory", qf.guarantee_memory, "GPU memory guaranteed, e.g. 160GiB");
  queue_set->add_option("--limit", qf.limit, "the most GPUs it may hold, borrowing included");
  queue_set->add_option("--limit-memory", qf.limit_memory, "the most GPU memory it may hold");
  queue_set->add_option("--weight", qf.weight, "its share of idle capacity beyond guarantees, relative to other queues");
  queue_set->add_option("--member", qf.members, "a user, or @group, whose requests it takes (repeat; replaces the members)");
  queues->add_subcommand("delete", "remove queue NAME (its members' requests then belong to no queue)")
      ->add_option("name", qf.name, "queue name")
      ->required();
  accounts->add_subcommand("delete", "delete NAME: its key stops working")->add_option("name", account, "service account name")->required();
  accounts->add_subcommand("list", "list service accounts and their groups (never their keys)");

  try {
    // `gpool run python train.py -n 5`: the command's options are its own (command_line.h).
    std::vector<std::string> args = markCommandStart(app, "run", std::vector<std::string>(argv + 1, argv + argc));
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints the message, or the help asked for (code 0)
    return code == 0 ? 0 : kExitUsage;
  }
  std::unique_ptr<AllocatorClient> client;
  try {
    client = std::make_unique<AllocatorClient>(url, ca_file);
  } catch (const std::exception& e) {
    die(kExitUsage, e.what());
  }
  AllocatorClient& a = *client;
  a.munge_socket = munge_socket;
  try {
    if (!service_key_file.empty()) a.service_key = firstLine(service_key_file);
    if (*admin && !key_file.empty()) a.admin_key = gpool::token::loadKey(key_file, false);
  } catch (const std::exception& e) {
    die(kExitUsage, e.what());
  }

  if (*run_cmd || *lease_cmd) {
    // The lease is held for the command, which may run one CUDA process after another: it lasts until
    // the command ends, not only while a process is connected.
    json req = {{"n", n}, {"p", p}, {"pool", pool}, {"ends_with_clients", false}};
    if (!user.empty()) req["user"] = user;
    if (!group.empty()) req["group"] = group;
    if (!priority.empty()) req["priority"] = priority;
    if (min_fraction > 0) {
      if (min_fraction > p) die(kExitUsage, "--min-fraction must not be more than -p (" + gpool::allocator::formatNumber(p) + ")");
      req["min_p"] = min_fraction;
    }
    if (non_preemptible) req["preemptible"] = false;
    if (!kind.empty()) req["kind"] = kind;
    if (*run_cmd && requeue) req["restartable"] = true;  // the allocator may move it to a faster GPU type
    if (*run_cmd) req["job"] = gpool::token::randomHex(8);  // one job across its requeues (least-attained pools)
    if (!estimate.empty()) {
      try {
        req["estimate_s"] = static_cast<double>(gpool::allocator::parseDuration(estimate).count()) / 1000;
      } catch (const std::exception& e) {
        die(kExitUsage, std::string("--estimate: ") + e.what());
      }
    }
    if (!time_limit.empty()) {
      try {
        req["time_limit"] = static_cast<double>(gpool::allocator::parseDuration(time_limit).count()) / 1000;
      } catch (const std::exception& e) {
        die(kExitUsage, std::string("--time: ") + e.what());
      }
      if (req["time_limit"].get<double>() <= 0) die(kExitUsage, "--time must be longer than 0s");
    }
    if (!gpu_types.empty()) {
      std::vector<std::string> types;
      std::stringstream in(gpu_types);
      for (std::string t; std::getline(in, t, ',');)
        if (!t.empty()) types.push_back(t);
      req["gpu_types"] = types;
    }
    if (!m.empty()) {
      try {
        req["m"] = gpool::allocator::parseSize(m);
      } catch (const std::exception& e) {
        die(kExitUsage, std::string("-m: ") + e.what());
      }
    }
    double wait_s = -1;
    if (wait != "forever") {
      try {
        wait_s = static_cast<double>(gpool::allocator::parseDuration(wait).count()) / 1000;
      } catch (const std::exception& e) {
        die(kExitUsage, std::string("--wait: ") + e.what());
      }
    }
    req["wait"] = wait_s;
    if (*run_cmd) return gpool::cli::run(a, {req, wait_s, requeue, command});
    return gpool::cli::holdLease(a, req, wait_s, static_cast<pid_t>(notify_pid));
  }
  if (*status_cmd) return status(a, as_json);
  if (*release_cmd) return release(a, release_ids);
  if (*usage_cmd) return usage(a, since, as_json);
  if (*whoami) {
    json w = must(a, "GET", "/v1/whoami", Proof::kIdentity);
    std::string groups;
    for (const auto& g : w["groups"]) groups += (groups.empty() ? "" : ",") + gpool::printable(g.get<std::string>());
    std::printf("user %s, groups %s (known by %s)%s\n", gpool::printable(w["user"].get<std::string>()).c_str(),
                groups.empty() ? "none" : groups.c_str(), w["via"].get<std::string>().c_str(), w["admin"].get<bool>() ? ", admin" : "");
    return 0;
  }
  if (*policy) {
    if (policy->got_subcommand("show")) {
      auto [st, text] = a.call("GET", "/v1/policy", Proof::kNone);
      if (st != 200) die(kExitAllocator, text);
      std::cout << text;
      return 0;
    }
    std::string text = policy->got_subcommand("set") && policy_file != "-" && !fs::exists(policy_file) ? policy_file
                                                                                                   : readFile(policy_file);
    try {
      gpool::allocator::parsePolicy(text);  // the same checks the allocator makes, before sending
    } catch (const std::exception& e) {
      die(kExitUsage, e.what());
    }
    json r = must(a, "PUT", "/v1/policy", Proof::kIdentity, text);
    std::printf("policy replaced (%d pools)\n", r.value("pools", 0));
    for (const auto& note : r.value("notes", json::array())) std::printf("note: %s\n", note.get<std::string>().c_str());
    return 0;
  }
  if (*drain) {
    must(a, "POST", "/v1/servers/" + server + "/drain", Proof::kIdentity, json{{"drain", !undo}}.dump());
    std::printf("%s %s\n", server.c_str(), undo ? "is back in service" : "drained: no new shares (running leases continue)");
    return 0;
  }
  if (*accounts) return serviceAccount(a, *accounts, account, account_groups, key_out);
  if (*queues) {
    bool remove = queues->got_subcommand("delete");
    json r = remove ? must(a, "DELETE", "/v1/queues/" + qf.name, Proof::kIdentity)
                    : must(a, "PUT", "/v1/queues/" + qf.name, Proof::kIdentity, qf.toml());
    std::printf("queue %s %s\n", qf.name.c_str(), remove ? "removed" : "set");
    printQueues(r["queues"]);
    return 0;
  }
  if (*servers) {
    if (*enroll) {
      must(a, "PUT", "/v1/servers/" + server + "/key", Proof::kIdentity, readFile(server_pub));
      std::printf("%s enrolled: the allocator accepts its requests signed with that key\n", server.c_str());
    } else {
      must(a, "DELETE", "/v1/servers/" + server + "/key", Proof::kIdentity);
      std::printf("%s unenrolled: its requests are refused\n", server.c_str());
    }
    return 0;
  }
  return 0;
}
