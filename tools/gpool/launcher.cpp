#include "launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "cli_common.h"
#include "descendants.h"
#include "gpool/allocator/lease_token.h"
#include "gpool/allocator/notices.h"
#include "gpool/printable.h"
#include "lease_watch.h"
#include "stopped_keeper.h"

namespace gpool::cli {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

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
std::atomic<int> g_stop{0};  // a signal that came while no command ran: gpool stops waiting (acquire)
// Signals sent to gpool (kill, a job scheduler) go on to the command. One the terminal sent (Ctrl-C) has
// reached the command already, as they share the process group: not sent twice. While gpool waits for
// GPUs (no command runs), SIGINT, SIGTERM, SIGHUP and SIGQUIT stop it: the request is withdrawn.
void forward(int sig, siginfo_t* info, void*) {
  pid_t c = g_child.load();
  if (!c) {
    if (sig != SIGUSR1 && sig != SIGUSR2) g_stop = sig;
    return;
  }
  if (info && info->si_code == SI_KERNEL) return;
  ::kill(c, sig);
}

// Dies with 128 + the signal when one came while gpool waited, withdrawing the request `id` (if any).
void stopIfSignalled(AllocatorClient& a, const std::string& id) {
  int sig = g_stop.load();
  if (!sig) return;
  if (!id.empty()) a.call("DELETE", "/v1/leases/" + id, Proof::kLease);
  die(128 + sig, std::string("stopped by SIG") + sigabbrev_np(sig) + " while waiting for GPUs" +
                     (id.empty() ? "" : ": request " + id + " withdrawn"));
}

// Releases lease `id`: where no allocator answers (a failover between replicas, a restart), it asks again
// for up to 30 s, so that the share frees at once rather than when the lease's heartbeats time out.
// Returns the last answer.
std::pair<int, std::string> release(AllocatorClient& a, const std::string& id) {
  auto r = a.call("DELETE", "/v1/leases/" + id, Proof::kLease);
  auto start = std::chrono::steady_clock::now();
  for (double delay = 0.2; r.first == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(30); delay = std::min(delay * 2, 2.0)) {
    if (delay == 0.2) std::fprintf(stderr, "gpool: releasing lease %s: %s; retrying\n", id.c_str(), r.second.c_str());
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    r = a.call("DELETE", "/v1/leases/" + id, Proof::kLease);
  }
  return r;
}

constexpr int kForwarded[] = {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGINT, SIGQUIT};

// How long gpool has waited for a lease, and the jitter of its back-off.
struct WaitClock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::mt19937 rng{std::random_device{}()};
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  double jitter(double d) { return d * std::uniform_real_distribution<double>(0.8, 1.2)(rng); }
};

// Submits the request, retrying with back-off while the allocator cannot be reached. A retry carries the
// same request_key: where the first try was granted and only its answer was lost, it gets that lease.
// The allocator's answer (granted or queued); dies on a refusal.
json submit(AllocatorClient& a, const json& request, double wait_s, WaitClock& clock) {
  json keyed = request;
  keyed["request_key"] = token::randomHex(16);
  for (double delay = 0.2;; delay = std::min(delay * 2, 5.0)) {
    stopIfSignalled(a, "");
    auto [status, text] = a.call("POST", "/v1/leases", Proof::kIdentity, keyed.dump());
    if (status == AllocatorClient::kNoProof) die(kExitAllocator, text);  // (munged not running: waiting will not start it)
    if (status == 0) {
      if (wait_s >= 0 && clock.elapsed() > wait_s) die(kExitAllocator, text);
      double d = clock.jitter(delay);
      std::fprintf(stderr, "gpool: %s; retrying in %.1fs\n", text.c_str(), d);
      std::this_thread::sleep_for(std::chrono::duration<double>(d));
      continue;
    }
    json lease = json::parse(text, nullptr, false);
    if (status == 409 || status == 422 || status == 400 || status == 401 || status == 403) {
      std::string why = lease.is_object() ? lease.value("error", text) : text;
      die(kExitRefused, "refused: " + why);
    }
    if (status != 201 && status != 202) die(kExitAllocator, "unexpected answer " + std::to_string(status) + ": " + text);
    return lease;
  }
}

// Queued: long-polls `lease` until it is granted, saying what it waits for (each poll is also a heartbeat;
// the back-off spaces the polls when nothing changes). Dies when --wait runs out or the request ends.
void waitInQueue(AllocatorClient& a, json& lease, double wait_s, WaitClock& clock) {
  const std::string id = lease.at("id");
  std::string last_note;
  double last_print = -100, delay = 0.1;
  while (lease.at("state") == "queued") {
    stopIfSignalled(a, id);
    std::string note = lease.value("waiting_for", std::string("waiting for capacity")) + "; position " +
                       std::to_string(lease.value("position", 0)) + " in the queue";
    if (note != last_note || clock.elapsed() - last_print >= 30) {
      std::fprintf(stderr, "gpool: %s (waited %s)\n", note.c_str(), fmtDuration(clock.elapsed()).c_str());
      last_note = note;
      last_print = clock.elapsed();
    }
    if (wait_s >= 0 && clock.elapsed() > wait_s) {
      a.call("DELETE", "/v1/leases/" + id, Proof::kLease);
      die(kExitWaitRanOut, "gave up after --wait " + fmtDuration(wait_s) + ": " + note);
    }
    int wait_ms = static_cast<int>(clock.jitter(delay * 1000));
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
}

// Requests a lease and waits for it (queue progress on stderr); dies with a clear message on refusal,
// when --wait runs out, or when the allocator stays unreachable past it.
json acquire(AllocatorClient& a, const json& request, double wait_s) {
  WaitClock clock;
  json lease = submit(a, request, wait_s, clock);
  a.lease_key = lease.value("lease_key", "");
  waitInQueue(a, lease, wait_s, clock);
  if (clock.elapsed() > 1) std::fprintf(stderr, "gpool: granted after %s\n", fmtDuration(clock.elapsed()).c_str());
  return lease;
}

// The environment a program needs to use a lease through gpool's client library: every share in
// GPOOL_SHARES ("ADDRESS DEVICE TOKEN", comma-separated; devices 0..N-1 in this order), the first one also
// as GPOOL_SERVER/GPOOL_DEVICE/GPOOL_TOKEN, and what each share is (GPOOL_FRACTION, GPOOL_MEMORY in bytes:
// an elastic request learns here what it got).
std::string sharesText(const json& shares) {
  std::string text;
  for (const auto& s : shares)
    text += (text.empty() ? "" : ",") + s.at("address").get<std::string>() + " " + std::to_string(s.at("device").get<int>()) + " " +
            s.at("token").get<std::string>();
  return text;
}

std::vector<std::pair<std::string, std::string>> leaseEnv(const json& lease) {
  const json& share = lease.at("shares").at(0);
  std::string shares = sharesText(lease.at("shares"));
  std::ostringstream fraction;
  fraction << share.at("fraction").get<double>();
  return {{"GPOOL_SERVER", share.at("address")}, {"GPOOL_DEVICE", std::to_string(share.at("device").get<int>())},
          {"GPOOL_TOKEN", share.at("token")}, {"GPOOL_LEASE", lease.at("id")}, {"GPOOL_SHARES", shares},
          {"GPOOL_FRACTION", fraction.str()}, {"GPOOL_MEMORY", std::to_string(share.at("memory").get<uint64_t>())}};
}

void describe(const json& lease, const json& request) {
  std::string where;
  for (const auto& sh : lease.at("shares"))
    where += (where.empty() ? "" : ", ") + sh.at("server").get<std::string>() + ":" + std::to_string(sh.at("device").get<int>()) +
             " (" + sh.at("address").get<std::string>() + ")";
  double got = lease.at("shares").at(0).at("fraction").get<double>(), asked = request.value("p", 1.0);
  std::ostringstream elastic;
  if (got + 1e-9 < asked) elastic << " (elastic: asked for " << asked << ", took what was free)";
  int64_t limit_ms = lease.contains("request") ? lease["request"].value("time_limit_ms", int64_t{0}) : 0;
  std::string limit = limit_ms > 0 ? "; time limit " + fmtDuration(static_cast<double>(limit_ms) / 1000) : "";
  std::fprintf(stderr, "gpool: lease %s: %zu x %g GPU on %s%s%s\n", lease.at("id").get<std::string>().c_str(), lease.at("shares").size(),
               got, where.c_str(), elastic.str().c_str(), limit.c_str());
}

// After the command: what its lease's servers measured of it (the release's answer carries their last
// report), said when its launches were held back for its share, so its user knows a larger -p would run
// it faster. Nothing for a whole GPU (not timed) or a lease whose servers never reported.
void sayWhatItUsed(const std::string& answer, const json& lease, double ran_s) {
  json r = json::parse(answer, nullptr, false);
  if (!r.is_object() || !r.contains("use") || !r["use"].is_object()) return;
  const double device_s = r["use"].value("device_seconds", 0.0), held_s = r["use"].value("held_back_seconds", 0.0);
  if (held_s <= 0) return;
  const double share = lease.at("shares").at(0).at("fraction").get<double>();
  std::fprintf(stderr,
               "gpool: lease %s: in %s its kernels ran %.1f s on the GPU, and its processes' launches waited %.1f s in all "
               "for its %g share of the GPU's time (as its servers last reported)%s\n",
               lease.at("id").get<std::string>().c_str(), fmtDuration(ran_s).c_str(), device_s, held_s, share,
               held_s >= 0.1 * ran_s ? "; with a larger -p it would wait less" : "");
}

// Whether an inherited CUDA_VISIBLE_DEVICES's first entry is a device number past the lease's `n` devices
// (a batch scheduler's choice among this host's GPUs), through which the command's CUDA would see no
// device at all. Says so when it is: the command then runs without it.
bool visibleDevicesHideLease(size_t n) {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!v || !*v) return false;
  std::string first(v, std::strcspn(v, ","));
  first.erase(0, first.find_first_not_of(' '));
  if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos || first.size() > 6) return false;
  if (std::stoul(first) < n) return false;
  std::fprintf(stderr, "gpool: CUDA_VISIBLE_DEVICES=%s (inherited: a batch scheduler's choice among this host's GPUs?) names "
                       "none of the lease's devices 0..%zu, so CUDA would see no device: the command runs without it. Set it "
                       "inside the command to choose among the lease's devices\n",
               gpool::printable(v).c_str(), n - 1);
  return true;
}

// A private directory for the run's preemption and progress files, removed however gpool exits.
std::string g_run_dir;
const std::string& runDir() {
  if (g_run_dir.empty()) {
    std::string tmpl = env("TMPDIR", "/tmp") + "/gpool-run.XXXXXX";
    if (!::mkdtemp(tmpl.data())) die(kExitUsage, "cannot make a directory in " + env("TMPDIR", "/tmp") + ": " + std::strerror(errno));
    g_run_dir = tmpl;
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(g_run_dir, ec);
    });
  }
  return g_run_dir;
}

// Where the command may write how far it got (GPOOL_PROGRESS_FILE), for its lease's heartbeats; one run
// of the command at a time, each counting afresh.
std::string progressFile() { return runDir() + "/progress"; }

// GPOOL_LEASE_FILE: the lease's shares with their newest tokens (GPOOL_SHARES's format, one line), which
// the client library prefers to its environment's. A token admits connections for the policy's token_ttl;
// the heartbeats renew it, so a CUDA process the command starts an hour in still connects.
std::string leaseFile() { return runDir() + "/lease"; }

void writeLeaseFile(const json& shares) {
  std::string tmp = leaseFile() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << sharesText(shares) << "\n";
    if (!out) return;
  }
  std::error_code ec;  // its tokens are the lease's: this user's alone, as the directory is
  fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace, ec);
  std::rename(tmp.c_str(), leaseFile().c_str());
}

// How preemption notice reaches the leaseholder (the command of `gpool run`, or the program a `gpool lease`
// helper holds its lease for): the file GPOOL_PREEMPT_FILE names appears (one line of JSON: the lease, the
// request it makes room for, the seconds left and the deadline in unix seconds; no file when the name is
// empty), then the leaseholder gets SIGTERM. When the allocator revokes the shares at the end of the grace
// period, it gets SIGKILL: its GPUs are gone. `holder` says who it is now (0: nobody).
class Notice {
 public:
  Notice(std::string file, std::function<pid_t()> holder) : file_(std::move(file)), holder_(std::move(holder)) {}
  const std::string& file() const { return file_; }
  bool given() const { return given_; }
  bool revoked() const { return revoked_; }
  allocator::Notice why() const { return why_; }
  // When the command's processes must have stopped: the GPUs' revocation under notice, else `otherwise`.
  std::chrono::steady_clock::time_point stopBy(std::chrono::steady_clock::duration otherwise) const {
    return given_ ? revoke_at_.load() : std::chrono::steady_clock::now() + otherwise;
  }
  void reset() {
    given_ = false;
    revoked_ = false;
    ::unlink(file_.c_str());
  }
  LeaseWatch::Events events(const std::string& lease) {
    return {[this, lease](int64_t in_ms, allocator::Notice why, const std::string& for_request) { give(lease, in_ms, why, for_request); },
            [this, lease] {
              ::unlink(file_.c_str());
              std::fprintf(stderr, "gpool: lease %s: preemption notice withdrawn (the request it made room for stopped waiting)\n",
                           lease.c_str());
            },
            [this, lease](const std::string& reason) {
              if (given_) revoked_ = true;
              pid_t c = holder_();
              if (!c) return;  // released after the command ended
              std::fprintf(stderr, "gpool: lease %s ended: %s\n", lease.c_str(), reason.c_str());
              if (given_) {
                std::fprintf(stderr, "gpool: its GPUs are revoked: stopping process %d (SIGKILL)\n", static_cast<int>(c));
                ::kill(c, SIGKILL);
              }
            }};
  }

 private:
  void give(const std::string& lease, int64_t in_ms, allocator::Notice why, const std::string& for_request) {
    double grace = static_cast<double>(in_ms) / 1000;
    auto deadline = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() + grace;
    json j = {{"lease", lease}, {"for", for_request}, {"grace_s", grace}, {"deadline_unix", deadline}};
    if (!file_.empty()) {
      std::string tmp = file_ + ".tmp";
      std::ofstream(tmp) << j.dump() << "\n";
      std::rename(tmp.c_str(), file_.c_str());
    }
    revoke_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(in_ms);
    why_ = why;
    given_ = true;
    pid_t c = holder_();
    std::string told = c ? "SIGTERM to process " + std::to_string(c) : std::string("no process to tell");
    auto after = [&](std::string_view prefix) { return for_request.substr(std::min(for_request.size(), prefix.size())); };
    std::string what = why == allocator::Notice::kMove    ? "moved to a faster GPU type (" + after(allocator::kMovePrefix) + ", free now)"
                       : why == allocator::Notice::kRound ? "preempted by its pool's round: " + after(allocator::kRoundPrefix)
                       : why == allocator::Notice::kTimeLimit ? "stopped at its time limit (" + after(allocator::kTimeLimitPrefix) + ")"
                                                          : "preempted for request " + for_request;
    std::fprintf(stderr, "gpool: lease %s is being %s: %s; its GPUs are revoked in %.1fs\n", lease.c_str(), what.c_str(),
                 told.c_str(), grace);
    if (c) ::kill(c, SIGTERM);
  }
  std::string file_;
  std::function<pid_t()> holder_;
  std::atomic<bool> given_{false};
  std::atomic<bool> revoked_{false};
  std::atomic<allocator::Notice> why_{allocator::Notice::kNone};
  std::atomic<std::chrono::steady_clock::time_point> revoke_at_{};
};

// How long the processes a command left running get, after SIGTERM, before SIGKILL (descendants.h).
constexpr auto kLeftoverGrace = std::chrono::seconds(10);

// In the forked child: default dispositions for the signals gpool forwards (then `mask`, the signal mask
// from before the fork), the lease in the environment, and the command.
[[noreturn]] void execCommand(const json& lease, const std::vector<std::string>& command, const Notice& notice, int restarts,
                              int last_exit, bool drop_visible, const sigset_t& mask) {
  for (int sig : kForwarded) signal(sig, SIG_DFL);
  pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  std::string lib = clientLibDir(), ld = env("LD_LIBRARY_PATH");
  setenv("LD_LIBRARY_PATH", (lib + (ld.empty() ? "" : ":" + ld)).c_str(), 1);
  // Triton (torch.compile) links its launchers against the libcuda of the driver ldconfig lists, when
  // the client has one: point it at gpool's unless the user chose.
  setenv("TRITON_LIBCUDA_PATH", lib.c_str(), 0);
  for (const auto& [k, v] : leaseEnv(lease)) setenv(k.c_str(), v.c_str(), 1);
  if (drop_visible) unsetenv("CUDA_VISIBLE_DEVICES");
  setenv("GPOOL_PREEMPT_FILE", notice.file().c_str(), 1);
  setenv("GPOOL_PROGRESS_FILE", progressFile().c_str(), 1);
  setenv("GPOOL_LEASE_FILE", leaseFile().c_str(), 1);
  setenv("GPOOL_RESTARTS", std::to_string(restarts).c_str(), 1);
  if (restarts > 0) setenv("GPOOL_LAST_EXIT", std::to_string(last_exit).c_str(), 1);
  // GPOOL_ALLOCATOR stays, for `gpool status` or a sub-job's `gpool run` in the command; the library
  // asks for no lease of its own while GPOOL_SHARES names one (lease_shares.cpp).
  std::vector<char*> argv;
  for (const auto& c : command) argv.push_back(const_cast<char*>(c.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "gpool: cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// Runs the command once on a granted lease; its exit status (128 + the signal when a signal ended it).
int runOnce(AllocatorClient& a, const json& lease, const std::vector<std::string>& command, Notice& notice, int restarts,
            int last_exit) {
  std::string id = lease.at("id");
  writeLeaseFile(lease.at("shares"));
  const bool drop_visible = visibleDevicesHideLease(lease.at("shares").size());
  // A signal that comes while the command starts waits (else the child's copy of `forward` would swallow
  // it): the child takes it, with the default action, once its handlers are reset; gpool passes it on
  // once it knows the child.
  sigset_t forwarded, before;
  sigemptyset(&forwarded);
  for (int sig : kForwarded) sigaddset(&forwarded, sig);
  pthread_sigmask(SIG_BLOCK, &forwarded, &before);
  pid_t pid = ::fork();
  if (pid == 0) execCommand(lease, command, notice, restarts, last_exit, drop_visible, before);
  if (pid < 0) {  // (never -1 in g_child: kill(-1, sig) would reach every process of the user)
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    release(a, id);
    die(kExitUsage, std::string("cannot start the command (fork: ") + std::strerror(err) + "); lease " + id + " released");
  }
  g_child = pid;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  const int heartbeat_ms = lease.value("heartbeat_ms", 5000);
  auto keeper = std::make_unique<StoppedKeeper>(a, id, heartbeat_ms);  // (before the watch's thread: a fork)
  LeaseWatch::Events events = notice.events(id);
  events.shares = writeLeaseFile;  // renewed tokens, for the command's later processes
  auto watch = std::make_unique<LeaseWatch>(a.another(), id, heartbeat_ms, events, progressFile());
  const auto started = std::chrono::steady_clock::now();
  int status = waitForChild(pid);
  const double ran_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  g_child = 0;
  keeper.reset();  // (first: it is no leftover of the command's)
  endLeftovers([&] { return notice.stopBy(kLeftoverGrace); }, [&] { return notice.revoked(); });
  auto [st, text] = release(a, id);  // ends the watch's long poll too
  if (st != 200 && !notice.given()) std::fprintf(stderr, "gpool: releasing lease %s: %s\n", id.c_str(), text.c_str());
  if (st == 200) sayWhatItUsed(text, lease, ran_s);
  watch.reset();
  std::remove(progressFile().c_str());
  std::remove(leaseFile().c_str());
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

}  // namespace

int run(AllocatorClient& a, const RunOptions& o) {
  struct sigaction sa {};
  sa.sa_sigaction = forward;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwarded) sigaction(sig, &sa, nullptr);
  becomeSubreaper();
  Notice notice(runDir() + "/preempted", [] { return g_child.load(); });
  int last_exit = 0;
  for (int restarts = 0;; ++restarts) {
    json lease = acquire(a, o.request, o.wait_s);
    stopIfSignalled(a, lease.at("id"));  // (granted as the signal came)
    describe(lease, o.request);
    int status = runOnce(a, lease, o.command, notice, restarts, last_exit);
    if (!notice.given()) return status;
    if (notice.why() == allocator::Notice::kTimeLimit) {  // not preempted: done, whatever --requeue says
      std::fprintf(stderr, "gpool: the command reached the lease's time limit (it exited with status %d); gpool exits with %d\n",
                   status, kExitTimeLimit);
      return kExitTimeLimit;
    }
    if (!o.requeue) {
      std::fprintf(stderr, "gpool: the command was preempted (it exited with status %d); gpool exits with %d. "
                           "With --requeue, gpool would have run it again once granted\n", status, kExitPreempted);
      return kExitPreempted;
    }
    std::fprintf(stderr, "gpool: the command was preempted (it exited with status %d): requeued, restart %d\n", status, restarts + 1);
    last_exit = status;
    notice.reset();
  }
}

int holdLease(AllocatorClient& a, const json& request, double wait_s, pid_t holder) {
  json lease = acquire(a, request, wait_s);
  std::string id = lease.at("id");
  json out = json::object();
  for (const auto& [k, v] : leaseEnv(lease)) out[k] = v;
  writeLeaseFile(lease.at("shares"));  // for the processes the holder starts (the library exports it)
  out["GPOOL_LEASE_FILE"] = leaseFile();
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  std::atomic<bool> holding{true};  // until stdin closes: then the holder is gone, and no signal may reach its pid
  Notice notice(env("GPOOL_PREEMPT_FILE"), [&] { return holding ? holder : 0; });
  LeaseWatch::Events events = notice.events(id);
  events.shares = writeLeaseFile;
  if (holder == 0) {  // nobody to tell but the terminal
    events.ended = [id](const std::string& reason) { std::fprintf(stderr, "gpool: lease %s ended: %s\n", id.c_str(), reason.c_str()); };
  }
  auto watch = std::make_unique<LeaseWatch>(a.another(), id, lease.value("heartbeat_ms", 5000), events);
  char buf[256];
  while (::read(0, buf, sizeof buf) > 0) {  // until the process it holds the lease for is gone
  }
  holding = false;
  release(a, id);
  watch.reset();
  return 0;
}

}  // namespace gpool::cli
