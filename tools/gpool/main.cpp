// gpool: the command users and admins type. `gpool run` leases GPUs from gpool-allocator, waits (with
// back-off) while they are short, runs a command with gpool's client library and the lease in its
// environment, heartbeats, forwards signals, and releases the lease however the command ends.
// `gpool status` shows servers, GPUs, leases and the queue; `gpool admin` changes policies and drains.
#include <CLI/CLI.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "allocator_client.h"
#include "gpool/printable.h"
#include "lease_token.h"
#include "signed_request.h"
#include "policy.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Exit statuses of gpool itself (the command's own status is passed through otherwise).
constexpr int kExitUsage = 2, kExitRefused = 3, kExitWaitRanOut = 4, kExitAllocator = 5;

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "gpool: %s\n", msg.c_str());
  std::exit(code);
}

using gpool::cli::AllocatorClient;
using gpool::cli::Proof;

// The answer as JSON; dies with the allocator's message on an error.
json must(AllocatorClient& a, const std::string& method, const std::string& path, Proof proof, const std::string& body = "") {
  auto [status, text] = a.call(method, path, proof, body);
  if (status == 0) die(kExitAllocator, text);
  json j = json::parse(text, nullptr, false);
  if (status >= 400) die(kExitAllocator, j.is_object() && j.contains("error") ? j["error"].get<std::string>() : text);
  if (j.is_discarded()) die(kExitAllocator, "unexpected answer from the allocator: " + text.substr(0, 200));
  return j;
}

std::string env(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string fmtDuration(double s) {
  std::ostringstream o;
  if (s < 120) o << static_cast<int>(s) << "s";
  else o << static_cast<int>(s / 60) << "m" << static_cast<int>(s) % 60 << "s";
  return o.str();
}

// gpool's client library directory: GPOOL_LIB_DIR, else beside this program (installed: bin/../lib/gpool;
// build tree: tools/gpool/../../lib/gpool).
std::string clientLibDir() {
  if (auto d = env("GPOOL_LIB_DIR"); !d.empty()) return d;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (fs::path c : {self / ".." / "lib" / "gpool", self / ".." / ".." / "lib" / "gpool"})
    if (fs::exists(c / "libcuda.so.1", ec)) return fs::canonical(c, ec).string();
  die(kExitUsage, "cannot find gpool's client library (libcuda.so.1) beside " + self.string() + "; set GPOOL_LIB_DIR");
}

std::atomic<pid_t> g_child{0};
// Signals sent to gpool (kill, a job scheduler) go on to the command. One the terminal sent (Ctrl-C) has
// reached the command already, as they share the process group: not sent twice.
void forward(int sig, siginfo_t* info, void*) {
  if (info && info->si_code == SI_KERNEL) return;
  if (pid_t c = g_child.load()) ::kill(c, sig);
}

// --- gpool run ---------------------------------------------------------------------------------------
// Requests a lease and waits for it (queue progress on stderr); dies with a clear message on refusal,
// when --wait runs out, or when the allocator stays unreachable past it.
json acquire(AllocatorClient& a, const json& request, double wait_s) {
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::mt19937 rng(std::random_device{}());
  // Submit, retrying with back-off while the allocator cannot be reached.
  json lease;
  for (double delay = 0.2;; delay = std::min(delay * 2, 5.0)) {
    auto [status, text] = a.call("POST", "/v1/leases", Proof::kIdentity, request.dump());
    if (status == 0) {
      if (wait_s >= 0 && elapsed() > wait_s) die(kExitAllocator, text);
      double d = delay * std::uniform_real_distribution<double>(0.8, 1.2)(rng);
      std::fprintf(stderr, "gpool: %s; retrying in %.1fs\n", text.c_str(), d);
      std::this_thread::sleep_for(std::chrono::duration<double>(d));
      continue;
    }
    lease = json::parse(text, nullptr, false);
    if (status == 409 || status == 422 || status == 400 || status == 401 || status == 403) {
      std::string why = lease.is_object() ? lease.value("error", text) : text;
      die(kExitRefused, "refused: " + why);
    }
    if (status != 201 && status != 202) die(kExitAllocator, "unexpected answer " + std::to_string(status) + ": " + text);
    break;
  }
  std::string id = lease.at("id");
  a.lease_key = lease.value("lease_key", "");
  // Queued: long-poll (each poll is also a heartbeat); the back-off spaces the polls when nothing changes.
  std::string last_note;
  double last_print = -100, delay = 0.1;
  while (lease.at("state") == "queued") {
    std::string note = lease.value("waiting_for", std::string("waiting for capacity")) + "; position " +
                       std::to_string(lease.value("position", 0)) + " in the queue";
    if (note != last_note || elapsed() - last_print >= 30) {
      std::fprintf(stderr, "gpool: %s (waited %s)\n", note.c_str(), fmtDuration(elapsed()).c_str());
      last_note = note;
      last_print = elapsed();
    }
    if (wait_s >= 0 && elapsed() > wait_s) {
      a.call("DELETE", "/v1/leases/" + id, Proof::kLease);
      die(kExitWaitRanOut, "gave up after --wait " + fmtDuration(wait_s) + ": " + note);
    }
    int wait_ms = static_cast<int>(delay * 1000 * std::uniform_real_distribution<double>(0.8, 1.2)(rng));
    auto [status, text] = a.call("GET", "/v1/leases/" + id + "?wait_ms=" + std::to_string(wait_ms), Proof::kLease);
    if (status == 0) {
      std::fprintf(stderr, "gpool: %s; retrying\n", text.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    } else if (status != 200) {
      die(kExitAllocator, "lost lease request " + id + ": " + text);
    } else {
      lease = json::parse(text);
    }
    delay = std::min(delay * 2, 2.0);
  }
  if (lease.at("state") != "granted") die(kExitWaitRanOut, "lease request ended: " + lease.value("end_reason", std::string("?")));

  if (elapsed() > 1) std::fprintf(stderr, "gpool: granted after %s\n", fmtDuration(elapsed()).c_str());
  return lease;
}

// Heartbeats a granted lease on a thread until stopped; says so once if the allocator ended it.
class Heartbeat {
 public:
  Heartbeat(AllocatorClient& a, std::string id, int every_ms) : a_(a), id_(std::move(id)), every_ms_(std::max(100, every_ms)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Heartbeat() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    bool told = false;
    while (!cv_.wait_for(lock, std::chrono::milliseconds(every_ms_), [&] { return done_; })) {
      lock.unlock();
      auto [status, text] = a_.call("POST", "/v1/leases/" + id_ + "/heartbeat", Proof::kLease);
      if (status == 410 && !told) {
        json j = json::parse(text, nullptr, false);
        std::fprintf(stderr, "gpool: %s\n", j.is_object() ? j.value("error", text).c_str() : text.c_str());
        told = true;
      } else if (status == 0) {
        std::fprintf(stderr, "gpool: heartbeat: %s\n", text.c_str());
      }
      lock.lock();
    }
  }
  AllocatorClient& a_;
  std::string id_;
  int every_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// The environment a program needs to use a lease through gpool's client library: every share in
// GPOOL_SHARES ("ADDRESS DEVICE TOKEN", comma-separated; devices 0..N-1 in this order), and the first one
// also as GPOOL_SERVER/GPOOL_DEVICE/GPOOL_TOKEN.
std::vector<std::pair<std::string, std::string>> leaseEnv(const json& lease) {
  const json& share = lease.at("shares").at(0);
  std::string shares;
  for (const auto& s : lease.at("shares"))
    shares += (shares.empty() ? "" : ",") + s.at("address").get<std::string>() + " " + std::to_string(s.at("device").get<int>()) +
              " " + s.at("token").get<std::string>();
  return {{"GPOOL_SERVER", share.at("address")}, {"GPOOL_DEVICE", std::to_string(share.at("device").get<int>())},
          {"GPOOL_TOKEN", share.at("token")}, {"GPOOL_LEASE", lease.at("id")}, {"GPOOL_SHARES", shares}};
}

int run(AllocatorClient& a, const json& request, double wait_s, std::vector<std::string> command) {
  json lease = acquire(a, request, wait_s);
  std::string id = lease.at("id");
  std::string where;
  for (const auto& sh : lease.at("shares"))
    where += (where.empty() ? "" : ", ") + sh.at("server").get<std::string>() + ":" + std::to_string(sh.at("device").get<int>()) +
             " (" + sh.at("address").get<std::string>() + ")";
  std::fprintf(stderr, "gpool: lease %s: %zu x %g GPU on %s\n", id.c_str(), lease.at("shares").size(),
               lease.at("shares").at(0).at("fraction").get<double>(), where.c_str());

  auto beat = std::make_unique<Heartbeat>(a, id, lease.value("heartbeat_ms", 5000));

  struct sigaction sa {};
  sa.sa_sigaction = forward;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGINT, SIGQUIT}) sigaction(sig, &sa, nullptr);

  pid_t pid = ::fork();
  if (pid == 0) {
    for (int sig : {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGINT, SIGQUIT}) signal(sig, SIG_DFL);
    std::string lib = clientLibDir(), ld = env("LD_LIBRARY_PATH");
    setenv("LD_LIBRARY_PATH", (lib + (ld.empty() ? "" : ":" + ld)).c_str(), 1);
    for (const auto& [k, v] : leaseEnv(lease)) setenv(k.c_str(), v.c_str(), 1);
    unsetenv("GPOOL_ALLOCATOR");  // the lease is already held: the library must not ask for another
    std::vector<char*> argv;
    for (auto& c : command) argv.push_back(c.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "gpool: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  g_child = pid;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  beat.reset();
  auto [st, text] = a.call("DELETE", "/v1/leases/" + id, Proof::kLease);
  if (st != 200) std::fprintf(stderr, "gpool: releasing lease %s: %s\n", id.c_str(), text.c_str());
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

// --- gpool status --------------------------------------------------------------------------------------
std::string gib(uint64_t b) {
  std::ostringstream o;
  o.precision(3);
  o << b / 1073741824.0 << " GiB";
  return o.str();
}

int status(AllocatorClient& a, bool as_json) {
  json s = must(a, "GET", "/v1/status", Proof::kNone);
  if (as_json) {
    std::cout << s.dump(2) << "\n";
    return 0;
  }
  // Every name shown comes from the allocator's records: printed with control characters escaped.
  auto show = [](const json& v) { return gpool::printable(v.get<std::string>()); };
  std::printf("%-16s %-22s %-10s %-6s %s\n", "SERVER", "ADDRESS", "POOL", "STATE", "GPUS");
  for (const auto& srv : s["servers"])
    std::printf("%-16s %-22s %-10s %-6s %zu\n", show(srv["name"]).c_str(), show(srv["address"]).c_str(), show(srv["pool"]).c_str(),
                !srv["up"].get<bool>() ? "down" : srv["drain"].get<bool>() ? "drain" : "up", srv["gpus"].size());
  std::printf("\n%-20s %-28s %-10s %-8s %s\n", "GPU", "MODEL", "MEMORY", "IN USE", "MEMORY LEASED");
  for (const auto& srv : s["servers"])
    for (const auto& g : srv["gpus"])
      std::printf("%-20s %-28s %-10s %-8s %s\n", (show(srv["name"]) + ":" + std::to_string(g["index"].get<int>())).c_str(),
                  show(g["model"]).c_str(), gib(g["memory"]).c_str(),
                  (std::to_string(static_cast<int>(std::lround(g["used_fraction"].get<double>() * 100))) + "%").c_str(),
                  gib(g["used_memory"]).c_str());
  std::printf("\n%-26s %-10s %s\n", "LEASE", "USER", "SHARES (its devices 0, 1...: server:GPU x fraction)");
  for (const auto& l : s["leases"]) {
    std::string shares;
    for (const auto& sh : l["shares"])
      shares += (shares.empty() ? "" : ", ") + show(sh["server"]) + ":" + std::to_string(sh["device"].get<int>()) + " x " +
                gpool::allocator::formatNumber(sh["fraction"].get<double>());
    std::printf("%-26s %-10s %s\n", show(l["id"]).c_str(), show(l["request"]["user"]).c_str(), shares.c_str());
  }
  if (s.contains("queues") && !s["queues"].empty()) {  // guaranteed shares (the policy's [queues])
    std::printf("\n%-20s %-14s %10s %8s %6s %8s %8s %7s\n", "QUEUE", "PARENT", "GUARANTEE", "LIMIT", "WEIGHT", "HOLDS", "BORROWS", "WAITING");
    for (const auto& q : s["queues"]) {
      auto gpus = [](const json& v) { return v.is_null() ? std::string("-") : gpool::allocator::formatNumber(v.get<double>()); };
      std::printf("%-20s %-14s %10s %8s %6s %8s %8s %7d\n", show(q["name"]).c_str(), show(q["parent"]).c_str(),
                  gpus(q["guarantee_gpus"]).c_str(), gpus(q["limit_gpus"]).c_str(), gpus(q["weight"]).c_str(),
                  gpus(q["held_gpus"]).c_str(), gpus(q["borrowed_gpus"]).c_str(), q["waiting"].get<int>());
    }
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
               "The allocator is found at GPOOL_ALLOCATOR=http(s)://HOST:PORT or unix:PATH (or --allocator).\n"
               "It knows who you are from MUNGE (munged on this host), from its local socket (unix:PATH), or from\n"
               "a service account's key (GPOOL_SERVICE_KEY_FILE); `gpool whoami` shows what it sees."};
  app.require_subcommand(1);
  std::string url = env("GPOOL_ALLOCATOR"), service_key_file = env("GPOOL_SERVICE_KEY_FILE"), munge_socket = env("GPOOL_MUNGE_SOCKET"),
              ca_file = env("GPOOL_CA_FILE");
  app.add_option("--allocator", url, "allocator URL: http(s)://HOST:PORT or unix:PATH (default: $GPOOL_ALLOCATOR)");
  app.add_option("--ca-file", ca_file, "PEM CA file that verifies an https:// allocator (default: $GPOOL_CA_FILE, else the system's)");
  app.add_option("--service-key-file", service_key_file, "act as the service account whose key FILE holds (default: $GPOOL_SERVICE_KEY_FILE)");
  app.add_option("--munge-socket", munge_socket, "munged's socket (default: $GPOOL_MUNGE_SOCKET, else munged's own)");

  auto* run_cmd = app.add_subcommand("run", "lease GPUs, run COMMAND on them, release them when it exits");
  auto* lease_cmd = app.add_subcommand(
      "lease", "hold a lease for another process: print it as one line of JSON (the GPOOL_* environment), heartbeat "
               "it until standard input closes, then release it. gpool's client library runs this when a program "
               "starts with GPOOL_ALLOCATOR set and no lease.");
  int n = 1;
  double p = 1.0;
  std::string m, wait = "1h", pool = "default", priority, user, group;
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
  }
  run_cmd->add_option("command", command, "the command and its arguments, after --")->required();

  auto* status_cmd = app.add_subcommand("status", "servers, GPUs, shares, leases and the queue");
  bool as_json = false;
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
  accounts->add_subcommand("delete", "delete NAME: its key stops working")->add_option("name", account, "service account name")->required();
  accounts->add_subcommand("list", "list service accounts and their groups (never their keys)");

  CLI11_PARSE(app, argc, argv);
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
    json req = {{"n", n}, {"p", p}, {"pool", pool}};
    if (!user.empty()) req["user"] = user;
    if (!group.empty()) req["group"] = group;
    if (!priority.empty()) req["priority"] = priority;
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
    if (*run_cmd) return run(a, req, wait_s, command);
    json lease = acquire(a, req, wait_s);
    json out = json::object();
    for (const auto& [k, v] : leaseEnv(lease)) out[k] = v;
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
    {
      Heartbeat beat(a, lease.at("id"), lease.value("heartbeat_ms", 5000));
      char buf[256];
      while (::read(0, buf, sizeof buf) > 0) {  // until the process it holds the lease for is gone
      }
    }
    a.call("DELETE", "/v1/leases/" + lease.at("id").get<std::string>(), Proof::kLease);
    return 0;
  }
  if (*status_cmd) return status(a, as_json);
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
    return 0;
  }
  if (*drain) {
    must(a, "POST", "/v1/servers/" + server + "/drain", Proof::kIdentity, json{{"drain", !undo}}.dump());
    std::printf("%s %s\n", server.c_str(), undo ? "is back in service" : "drained: no new shares (running leases continue)");
    return 0;
  }
  if (*accounts) return serviceAccount(a, *accounts, account, account_groups, key_out);
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
