// gpool: the command users and admins type. `gpool run` and `gpool lease` (launcher.h) lease GPUs from
// gpool-allocator and run a command on them; `gpool status` and `gpool usage` (status_report.h) show
// servers, GPUs, leases, queues, the wait queue and accounting; `gpool admin` (admin_commands.h) changes
// policies and queues, drains servers, manages keys.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "admin_commands.h"
#include "allocator_client.h"
#include "cli_common.h"
#include "command_line.h"
#include "gpool/printable.h"
#include "launcher.h"
#include "lease_flags.h"
#include "status_report.h"

using nlohmann::json;

namespace {

using gpool::cli::AllocatorClient;
using gpool::cli::die;
using gpool::cli::env;
using gpool::cli::kExitAllocator;
using gpool::cli::kExitRefused;
using gpool::cli::kExitUsage;
using gpool::cli::must;
using gpool::cli::Proof;

// Where the allocator is and how gpool proves who asks: options of gpool itself, before its subcommand.
struct Connection {
  std::string url = env("GPOOL_ALLOCATOR"), service_key_file = env("GPOOL_SERVICE_KEY_FILE"),
              munge_socket = env("GPOOL_MUNGE_SOCKET"), ca_file = env("GPOOL_CA_FILE");

  void declare(CLI::App& app) {
    app.add_option("--allocator", url,
                   "allocator URL: http(s)://HOST:PORT (replicas: several, comma-separated) or unix:PATH (default: $GPOOL_ALLOCATOR)");
    app.add_option("--ca-file", ca_file, "PEM CA file that verifies an https:// allocator (default: $GPOOL_CA_FILE, else the system's)");
    app.add_option("--service-key-file", service_key_file, "act as the service account whose key FILE holds (default: $GPOOL_SERVICE_KEY_FILE)");
    app.add_option("--munge-socket", munge_socket, "munged's socket (default: $GPOOL_MUNGE_SOCKET, else munged's own)");
  }

  // The allocator's client; dies with a usage message on a bad URL or key file.
  std::unique_ptr<AllocatorClient> open() const {
    try {
      auto a = std::make_unique<AllocatorClient>(url, ca_file);
      a->munge_socket = munge_socket;
      if (!service_key_file.empty()) {
        std::string key = gpool::cli::readFile(service_key_file);
        a->service_key = key.substr(0, key.find_first_of("\r\n"));
      }
      return a;
    } catch (const std::exception& e) {
      die(kExitUsage, e.what());
    }
  }
};

// gpool run and gpool lease: the same lease options, and each its own.
struct LeaseCommands {
  CLI::App *run = nullptr, *lease = nullptr;
  gpool::cli::LeaseFlags flags;
  bool requeue = false;
  std::vector<std::string> command;
  int notify_pid = 0;

  void declare(CLI::App& app) {
    run = app.add_subcommand("run", "lease GPUs, run COMMAND on them, release them when it exits");
    run->footer(
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
    lease = app.add_subcommand(
        "lease", "hold a lease for another process: print it as one line of JSON (the GPOOL_* environment), heartbeat "
                 "it until standard input closes, then release it. gpool's client library runs this when a program "
                 "starts with GPOOL_ALLOCATOR set and no lease.");
    flags.declare(*run);
    flags.declare(*lease);
    run->add_flag("--requeue", requeue,
                  "when the command is preempted (SIGTERM, then the policy's grace period), wait for GPUs again and "
                  "rerun it (GPOOL_RESTARTS counts the runs before, GPOOL_LAST_EXIT is the last one's status); "
                  "without it gpool exits with status 75");
    run->add_option("command", command, "the command and its arguments: gpool's options end where it begins (so its own, "
                                        "as in `python train.py -n 5`, stay its own); a `--` before it is optional")
        ->required();
    lease->add_option("--notify-pid", notify_pid,
                      "the process the lease is held for: on preemption notice it gets SIGTERM (after the file "
                      "$GPOOL_PREEMPT_FILE names is written), and SIGKILL when the GPUs are revoked (the client "
                      "library passes its own pid)")
        ->check(CLI::PositiveNumber);
  }

  bool chosen() const { return *run || *lease; }

  int go(AllocatorClient& a) const {
    bool running = static_cast<bool>(*run);
    json req = flags.request(running && requeue, running);
    double wait_s = req["wait"].get<double>();
    if (running) return gpool::cli::run(a, {req, wait_s, requeue, command});
    return gpool::cli::holdLease(a, req, wait_s, static_cast<pid_t>(notify_pid));
  }
};

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

int whoami(AllocatorClient& a) {
  json w = must(a, "GET", "/v1/whoami", Proof::kIdentity);
  std::string groups;
  for (const auto& g : w["groups"]) groups += (groups.empty() ? "" : ",") + gpool::printable(g.get<std::string>());
  std::printf("user %s, groups %s (known by %s)%s\n", gpool::printable(w["user"].get<std::string>()).c_str(),
              groups.empty() ? "none" : groups.c_str(), w["via"].get<std::string>().c_str(), w["admin"].get<bool>() ? ", admin" : "");
  return 0;
}

// gpool status, usage, release and whoami: what users ask of the allocator besides leases.
struct QueryCommands {
  CLI::App *release = nullptr, *usage = nullptr, *status = nullptr, *whoami = nullptr;
  std::vector<std::string> release_ids;
  std::string since = "168h";
  bool as_json = false;

  void declare(CLI::App& app) {
    release = app.add_subcommand(
        "release", "end leases (a queued request is withdrawn): your own, or anyone's for an admin. The command "
                   "running on one loses its GPUs; `gpool status` lists the leases");
    release->add_option("lease", release_ids, "lease ids (L...)")->required();
    usage = app.add_subcommand("usage", "GPU time each user and group had (accounting), from live leases and the "
                                        "ended ones the allocator keeps (the policy's ended_lease_retention)");
    usage->add_option("--since", since, "how far back to count (e.g. 24h, 90m; at most 30 days)")->capture_default_str();
    usage->add_flag("--json", as_json, "print the allocator's answer");
    status = app.add_subcommand("status", "servers, GPUs, shares, leases and the queue");
    status->add_flag("--json", as_json, "print the allocator's status document");
    whoami = app.add_subcommand("whoami", "who the allocator takes you for: user, groups, how it knows, admin or not");
  }

  int go(AllocatorClient& a) const {
    if (*status) return gpool::cli::status(a, as_json);
    if (*release) return ::release(a, release_ids);
    if (*usage) return gpool::cli::usage(a, since, as_json);
    return ::whoami(a);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpool: run programs on pooled, remote, whole or fractional GPUs.\n"
               "The allocator is found at GPOOL_ALLOCATOR=http(s)://HOST:PORT or unix:PATH (or --allocator); with\n"
               "allocator replicas, list them all, comma-separated: gpool follows the one that leads.\n"
               "It knows who you are from MUNGE (munged on this host), from its local socket (unix:PATH), or from\n"
               "a service account's key (GPOOL_SERVICE_KEY_FILE); `gpool whoami` shows what it sees.",
               "gpool"};  // (named here: parse() is given the arguments without argv[0], and help says "Usage: gpool ...")
  app.require_subcommand(1);
  Connection connection;
  LeaseCommands leases;
  QueryCommands queries;
  gpool::cli::AdminCommands admin;
  connection.declare(app);
  leases.declare(app);
  queries.declare(app);
  admin.declare(app);
  try {
    // `gpool run python train.py -n 5`: the command's options are its own (command_line.h).
    std::vector<std::string> args = gpool::cli::markCommandStart(app, "run", std::vector<std::string>(argv + 1, argv + argc));
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints the message, or the help asked for (code 0)
    return code == 0 ? 0 : kExitUsage;
  }
  std::unique_ptr<AllocatorClient> client = connection.open();
  if (leases.chosen()) return leases.go(*client);
  if (admin.chosen()) return admin.run(*client);
  return queries.go(*client);
}
