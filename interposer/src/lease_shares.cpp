// The lease's shares (lease_shares.h).
#include "lease_shares.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "state.h"

extern char** environ;

namespace gpool::client {
namespace {

// A program started with only GPOOL_ALLOCATOR set gets its lease here, from a `gpool lease` helper: it
// asks the allocator (showing queue progress on our stderr), prints the lease, and heartbeats it until
// the pipe we hold closes — when this process ends, however it ends — then releases it.
std::string gpoolBinary() {
  if (const char* b = std::getenv("GPOOL_BIN"); b && *b) return b;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&gpoolBinary), &info) && info.dli_fname) {
    std::filesystem::path lib = std::filesystem::path(info.dli_fname).parent_path();  // .../lib/gpool
    for (auto candidate : {lib / ".." / ".." / "bin" / "gpool", lib / ".." / ".." / "tools" / "gpool" / "gpool"}) {
      std::error_code ec;
      if (std::filesystem::exists(candidate, ec)) return candidate.lexically_normal().string();
    }
  }
  return "gpool";  // on PATH
}

// The lease becomes this process's environment, as `gpool run` gives it to its command, so the processes
// it starts use it too (until it ends with this process): a child with a lease of its own could wait
// behind its parent's for ever. (Set at cuInit, the first call that needs the lease.)
void exportLease(const nlohmann::json& lease) {
  for (const auto& [name, value] : lease.items())
    if (name.rfind("GPOOL_", 0) == 0 && value.is_string()) ::setenv(name.c_str(), value.get_ref<const std::string&>().c_str(), 1);
}

// `gpool lease` for this process, with the request the environment describes (as gpool run's options).
// Preemption notice reaches this process as it reaches gpool run's command: GPOOL_PREEMPT_FILE (when
// set), SIGTERM, then SIGKILL when the GPUs are revoked.
std::vector<std::string> leaseCommand() {
  std::vector<std::string> args{gpoolBinary(), "lease", "--notify-pid", std::to_string(::getpid())};
  for (auto [env, flag] : {std::pair{"GPOOL_GPUS", "-n"}, std::pair{"GPOOL_FRACTION", "-p"}, std::pair{"GPOOL_MEMORY", "-m"},
                           std::pair{"GPOOL_WAIT", "--wait"}, std::pair{"GPOOL_POOL", "--pool"},
                           std::pair{"GPOOL_PRIORITY", "--priority"}, std::pair{"GPOOL_MIN_FRACTION", "--min-fraction"},
                           std::pair{"GPOOL_GPU_TYPE", "--gpu-type"}, std::pair{"GPOOL_JOB_KIND", "--kind"},
                           std::pair{"GPOOL_TIME_LIMIT", "--time"}})
    if (const char* v = std::getenv(env); v && *v) args.insert(args.end(), {flag, v});
  return args;
}

// Starts `args` in a process group of its own (a Ctrl-C meant for this process is not for it), its standard
// input and output pipes: `to` (its input, kept open while the lease is held) and `from` (its output).
// False, with `why`, when it cannot be started.
bool spawnHelper(std::vector<std::string> args, int& to, int& from, std::string& why) {
  int to_helper[2], from_helper[2];
  if (::pipe2(to_helper, O_CLOEXEC) != 0 || ::pipe2(from_helper, O_CLOEXEC) != 0) {
    why = "cannot create pipes for gpool lease";
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_helper[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_helper[1], 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(to_helper[0]);
  ::close(from_helper[1]);
  if (rc != 0) {
    why = "cannot run " + args[0] + " (" + std::strerror(rc) + "); set GPOOL_BIN to gpool's path";
    ::close(to_helper[1]);
    ::close(from_helper[0]);
    return false;
  }
  to = to_helper[1];
  from = from_helper[0];
  return true;
}

// The shares of the lease `gpool lease` printed (one line of JSON: its GPOOL_* environment); none, with
// `why`, when it printed none.
std::vector<Share> sharesOfLease(const nlohmann::json& j, std::string& why) {
  auto text = [&](const char* name) -> std::string {
    return j.contains(name) && j[name].is_string() ? j[name].get<std::string>() : std::string();
  };
  if (!j.is_object() || text("GPOOL_SERVER").empty() || text("GPOOL_TOKEN").empty()) {
    why = "gpool lease did not grant a lease (its message is above)";
    return {};
  }
  if (j.contains("GPOOL_SHARES")) return parseShares(text("GPOOL_SHARES"), why);
  std::string device = text("GPOOL_DEVICE");
  return {{text("GPOOL_SERVER"), static_cast<uint32_t>(std::strtoul(device.empty() ? "0" : device.c_str(), nullptr, 10)),
           text("GPOOL_TOKEN")}};
}

std::vector<Share> leaseFromAllocator(std::string& why) {
  int to = -1, from = -1;
  if (!spawnHelper(leaseCommand(), to, from, why)) return {};
  // `to` stays open (close-on-exec) for the life of this process: its closing ends the lease.
  std::string line;
  char c;
  while (::read(from, &c, 1) == 1 && c != '\n') line += c;
  ::close(from);
  auto j = nlohmann::json::parse(line, nullptr, false);
  std::vector<Share> shares = sharesOfLease(j, why);
  if (shares.empty()) {
    ::close(to);
    return shares;
  }
  exportLease(j);
  GPOOL_LOG(Level::kInfo, "lease %s from %s: %s device %u%s", j.value("GPOOL_LEASE", std::string("?")).c_str(),
            std::getenv("GPOOL_ALLOCATOR"), shares[0].address.c_str(), shares[0].device,
            shares.size() > 1 ? (" and " + std::to_string(shares.size() - 1) + " more share(s)").c_str() : "");
  return shares;
}

}  // namespace

std::vector<Share> parseShares(const std::string& text, std::string& why) {
  std::vector<Share> shares;
  std::stringstream in(text);
  for (std::string entry; std::getline(in, entry, ',');) {
    std::stringstream fields(entry);
    Share s;
    long long device = -1;
    std::string rest;
    if (!(fields >> s.address >> device >> s.token) || (fields >> rest) || device < 0 || device > 1023) {
      why = "GPOOL_SHARES entry \"" + entry + "\" is not ADDRESS DEVICE TOKEN";
      return {};
    }
    s.device = static_cast<uint32_t>(device);
    shares.push_back(std::move(s));
  }
  if (shares.empty()) why = "GPOOL_SHARES names no share";
  return shares;
}

// GPOOL_LEASE_FILE (gpool run's): the lease's shares with the newest tokens, which the heartbeats renew;
// empty when it is not set or cannot be read (then the environment's, which may have expired, serve).
std::string leaseFileShares() {
  const char* path = std::getenv("GPOOL_LEASE_FILE");
  if (!path || !*path) return {};
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line) || line.empty()) {
    GPOOL_LOG(Level::kWarn, "GPOOL_LEASE_FILE %s cannot be read; using the lease's first tokens, from GPOOL_SHARES", path);
    return {};
  }
  return line;
}

std::vector<Share> leaseShares(std::string& why) {
  std::vector<Share> all;
  const char* tok = std::getenv("GPOOL_TOKEN");
  const char* allocator = std::getenv("GPOOL_ALLOCATOR");
  if (std::string renewed = leaseFileShares(); !renewed.empty()) {
    all = parseShares(renewed, why);
  } else if (const char* list = std::getenv("GPOOL_SHARES"); list && *list) {
    all = parseShares(list, why);
  } else if (allocator && *allocator && !(tok && *tok)) {
    all = leaseFromAllocator(why);
  } else {
    const char* env = std::getenv("GPOOL_SERVER");
    const char* dev = std::getenv("GPOOL_DEVICE");
    all.push_back({env && *env ? env : "127.0.0.1:" + std::to_string(proto::kDefaultPort),
                   dev ? static_cast<uint32_t>(std::strtoul(dev, nullptr, 10)) : 0u, tok ? tok : ""});
  }
  return all;
}

}  // namespace gpool::client
