// gpool-allocator: the control plane. Inventory of gpool-servers and their GPUs, partition policies,
// the lease queue, signed lease tokens; state in SQLite. API: docs/api.md.
#include <CLI/CLI.hpp>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <cstdlib>
#include <thread>
#include <cstring>
#include <fstream>

#include "etcd_client.h"
#include "gpool/allocator/lease_token.h"
#include "gpool/daemon_log.h"
#include "gpool/protocol/transport.h"
#include "policy.h"
#include "request_gate.h"
#include "service.h"
#include "store.h"

namespace {

// Every connection is a descriptor: take the whole allowance the system gives, and say so when that is
// less than --max-connections needs. Past the budget, connections wait in the listen backlog
// (request_gate.h): the allocator never reaches the limit itself.
void raiseOpenFileLimit(size_t max_connections) {
  if (rlimit r{}; ::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
  rlimit r{};
  size_t budget = gpool::allocator::RequestGate::descriptorBudget();
  if (budget < max_connections && ::getrlimit(RLIMIT_NOFILE, &r) == 0)
    spdlog::warn("only {} open files allowed (RLIMIT_NOFILE): {} connections can be open at once, not the {} of "
                 "--max-connections; more wait in the listen backlog. Raise the limit (systemd LimitNOFILE=, ulimit -n) "
                 "or lower --max-connections",
                 r.rlim_cur, budget, max_connections);
}

// The default of --max-client-cpu-total: half the CPUs this process may run on, at least one.
double halfTheCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 2;
  return std::max(1.0, cpus / 2.0);
}

// The first line of `path`, which holds a secret: a file that others may read is named in a warning.
std::string readPasswordFile(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) throw std::runtime_error("cannot read a password from " + path);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty()) throw std::runtime_error(path + " starts with an empty line, not a password");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)))
    spdlog::warn("{} (an etcd password) may be read by others: chmod 600 {}", path, path);
  return line;
}

// Set in a replica started again after losing the lead: it waits for etcd rather than exit without it.
constexpr const char* kRestarted = "GPOOL_ALLOCATOR_RESTARTED";

// Waits until some member of the etcd store answers (a replica that lost the lead because etcd was out
// of reach must not exit for it: it stands by again once etcd is back).
void waitForStore(const std::string& store, const gpool::allocator::EtcdAccess& access) {
  for (int tries = 0;; ++tries) {
    try {
      gpool::allocator::EtcdClient(store, 2, access).call("/v3/maintenance/status", nlohmann::json::object());
      return;
    } catch (const gpool::allocator::StoreError& e) {
      if (tries % 10 == 0) spdlog::warn("{}; waiting for etcd", e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

// SIGINT and SIGTERM stop the allocator whatever it is doing. Before it serves (waiting for etcd,
// reading its state) it exits at once: it has nothing to finish. Once it serves, main stops the service,
// which gets kStopGrace to finish; a stop that takes longer (a store that does not answer) ends the
// process then. A replica that is told to stop never starts again as a standby (startAgainAsStandby).
constexpr auto kStopGrace = std::chrono::seconds(20);
std::atomic<bool> g_serving{false}, g_stopping{false};

std::future<int> watchStopSignals(sigset_t signals) {
  auto told = std::make_shared<std::promise<int>>();
  std::future<int> stop = told->get_future();
  std::thread([signals, told] {
    int sig = 0;
    while (sigwait(&signals, &sig) != 0) {
    }
    g_stopping = true;
    if (!g_serving) {
      spdlog::info("signal {} while starting: exiting", sig);
      spdlog::default_logger()->flush();
      std::_Exit(0);
    }
    told->set_value(sig);
    std::this_thread::sleep_for(kStopGrace);
    spdlog::error("still stopping {} s after signal {}: exiting now", kStopGrace.count(), sig);
    spdlog::default_logger()->flush();
    std::_Exit(1);
  }).detach();
  return stop;
}

// Another replica leads now: this process starts again from nothing, as a standby. Its descriptors (the
// listening sockets among them) close on exec, so that the new image can bind them again. The requests it
// was answering (a write that found the lead lost answers 503) first get half a second to go out whole:
// an exec at once cut their replies short.
[[noreturn]] void startAgainAsStandby(char** argv) {
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (g_stopping) {
    spdlog::info("no longer leads, and was told to stop: exiting");
    spdlog::default_logger()->flush();
    std::_Exit(0);
  }
  spdlog::critical("starting again as a standby");
  spdlog::default_logger()->flush();
  ::setenv(kRestarted, "1", 1);
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  ::execv("/proc/self/exe", argv);
  spdlog::critical("cannot start again ({}): exiting", std::strerror(errno));
  std::_Exit(3);
}

// gpool-allocator's command line.
struct CommandLine {
  std::string listen = "127.0.0.1:7430", socket, tls_cert, tls_key, munge_socket, log_level = "info";
  size_t max_connections = 4096, unread_mib = 1024, per_address = 0;
  double client_cpu = 0.25, client_cpu_total = halfTheCpus();
  std::string config, db = "gpool-allocator.db", store, advertise, etcd_password_file;
  gpool::allocator::EtcdAccess etcd_access;
  int leader_ttl_s = 3;
  std::string key_file, token_key;

  void declare(CLI::App& app) {
    declareListeners(app);
    declareClientLimits(app);
    declareState(app);
    declareKeys(app);
    gpool::daemon::addLogLevelOption(app, log_level);
  }

  // Where the API is served: TCP (HTTP or HTTPS), a Unix socket, and MUNGE to know users by.
  void declareListeners(CLI::App& app) {
    app.add_option("--listen", listen, "HOST:PORT of the HTTP API")->capture_default_str();
    app.add_option("--socket", socket,
                   "also serve the API on this Unix socket, where local users are known by their uid without any "
                   "credential (e.g. /run/gpool/allocator.sock; clients: GPOOL_ALLOCATOR=unix:PATH)");
    auto* cert = app.add_option("--tls-cert", tls_cert, "PEM certificate (chain): serve the API over HTTPS (with --tls-key)")
                     ->check(CLI::ExistingFile);
    app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert")->check(CLI::ExistingFile)->needs(cert);
    cert->needs(app.get_option("--tls-key"));
    app.add_option("--munge-socket", munge_socket, "munged's socket, to check users' MUNGE credentials (default: munged's own)");
  }

  // What clients may cost the allocator: connections, unread answers, CPU.
  void declareClientLimits(CLI::App& app) {
    app.add_option("--max-connections", max_connections,
                   "TCP connections held at once. One costs a thread (made when needed) only while a request of it is "
                   "answered (a long poll until its answer); one waiting for its request, or for its client to take an answer, costs a descriptor. With all held, "
                   "a new one replaces a waiting one of the client with the most waiting; with all being answered, it waits to be accepted")
        ->capture_default_str()
        ->check(CLI::Range(size_t{16}, size_t{65536}));
    app.add_option("--max-unread-answers", unread_mib,
                   "MiB of answers that clients have not read yet, held at once for each listener (the rest of an answer "
                   "waiting in the allocator, and what its socket's kernel buffer holds). Past it, the client holding the "
                   "most loses its oldest answer (its connection is reset), so clients that do not read cannot make the "
                   "allocator hold their answers without end")
        ->capture_default_str()
        ->check(CLI::Range(size_t{1}, size_t{1} << 20));
    app.add_option("--max-client-cpu", client_cpu,
                   "of one CPU, what answering one client (an address, for IPv6 its /64 network; a local user) may cost "
                   "the allocator on average. A client saves up to 4 s of its share while it asks for little; once it has "
                   "spent more, its requests wait, holding no thread, until its share has paid off what it owes, so a "
                   "client asking over and over for costly answers leaves the rest of the CPU to the others (0: no limit)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1024.0));
    app.add_option("--max-client-cpu-total", client_cpu_total,
                   "of one CPU, what all the clients asking at once may cost the allocator together: with more of them "
                   "than it gives each --max-client-cpu, they split it, so a crowd from many addresses costs it this "
                   "much, not a share for each address; a client asking little is still answered at once. Clients "
                   "asking: those that spent some of their share lately (metric gpool_allocator_clients_asking). "
                   "Default: half the CPUs the allocator may run on, at least 1 (0: no total)")
        ->default_str(fmt::format("{:g}", client_cpu_total))
        ->check(CLI::Range(0.0, 1024.0));
    app.add_option("--max-connections-per-address", per_address,
                   "of --max-connections, those one client address (for IPv6, one /64 network) may hold at once; more from it are closed as they "
                   "come, and its clients retry (default: a quarter of --max-connections; a login node holds one "
                   "connection per running gpool run)")
        ->check(CLI::Range(size_t{1}, size_t{65536}));
  }

  // Where its state is kept (SQLite, or an etcd cluster shared by replicas), and the policy to start with.
  void declareState(CLI::App& app) {
    app.add_option("--config", config, "partition policy (TOML) used when the database holds none; see docs/admin.md");
    app.add_option("--db", db, "SQLite database holding servers, leases and the policy (created when missing)")
        ->capture_default_str();
    app.add_option("--store", store,
                   "where servers, leases and the policy are kept instead of --db: etcd://HOST:PORT[,HOST:PORT...] (an etcd "
                   "cluster's client URLs; docs/admin.md). Several allocators may share one: one leads, the others stand by "
                   "and take over within --leader-ttl when it stops. Give them all the same --key-file and --token-key");
    app.add_option("--advertise", advertise,
                   "with --store etcd://: the URL clients reach this allocator at, which standbys give them while it leads "
                   "(default: http(s)://HOST:PORT of --listen, with this host's name for 0.0.0.0)");
    auto* etcd_ca = app.add_option("--etcd-ca", etcd_access.ca,
                                   "with --store etcd://: reach etcd's members over HTTPS, verifying them with this CA (PEM)")
                        ->check(CLI::ExistingFile);
    auto* etcd_cert = app.add_option("--etcd-cert", etcd_access.cert,
                                     "with --etcd-ca: this allocator's client certificate (PEM), for etcd's --client-cert-auth")
                          ->check(CLI::ExistingFile)
                          ->needs(etcd_ca);
    app.add_option("--etcd-key", etcd_access.key, "the private key of --etcd-cert (PEM)")->check(CLI::ExistingFile)->needs(etcd_cert);
    etcd_cert->needs(app.get_option("--etcd-key"));
    auto* etcd_user = app.add_option("--etcd-user", etcd_access.user,
                                     "with --store etcd://: the etcd user this allocator acts as, where etcd's authentication is on "
                                     "(its role must read and write the /gpool/ prefix)");
    app.add_option("--etcd-password-file", etcd_password_file,
                   "the --etcd-user's password: this file's first line (keep it mode 0600; a password is never taken on the "
                   "command line, where ps shows it)")
        ->check(CLI::ExistingFile)
        ->needs(etcd_user);
    etcd_user->needs(app.get_option("--etcd-password-file"));
    app.add_option("--leader-ttl", leader_ttl_s,
                   "with --store etcd://: seconds a leader that stopped answering etcd (dead, or cut off) keeps the lead; "
                   "a standby takes over after about as long")
        ->capture_default_str()
        ->check(CLI::Range(2, 60));
  }

  // The admin key and the key that signs lease tokens.
  void declareKeys(CLI::App& app) {
    app.add_option("--key-file", key_file,
                   "admin key: a secret that signs admin requests (gpool admin --key-file); keep it on this host and with "
                   "admins (created, mode 0600, when missing; default: the database path + .key)");
    app.add_option("--token-key", token_key,
                   "Ed25519 private key that signs lease tokens (created, mode 0600, when missing, with its public key "
                   "beside it as .pub: give that to every gpool-server --token-key; default: the database path + "
                   ".token.pem)");
  }

  // What the service runs with; throws when a key or the etcd password cannot be read.
  gpool::allocator::ServiceOptions serviceOptions(char** argv) {
    if (key_file.empty()) key_file = db + ".key";
    if (token_key.empty()) token_key = db + ".token.pem";
    gpool::allocator::ServiceOptions opt{store.empty() ? db : store, config, gpool::token::loadKey(key_file, true), token_key, munge_socket, socket, tls_cert, tls_key, max_connections};
    opt.max_connections_per_address = per_address;
    opt.max_unread_answers = unread_mib << 20;
    opt.max_client_cpu = client_cpu;
    opt.max_client_cpu_total = client_cpu_total;
    opt.advertise = advertise;
    opt.leader_ttl_s = leader_ttl_s;
    if (!etcd_password_file.empty()) etcd_access.password = readPasswordFile(etcd_password_file);
    opt.etcd_access = etcd_access;
    opt.on_deposed = [argv] { startAgainAsStandby(argv); };
    return opt;
  }
};

// Serves until SIGINT or SIGTERM (or, as a replica deposed, until it starts again as a standby).
int serve(CommandLine& cl, const std::string& host, uint16_t port, std::future<int>& stop, char** argv) {
  try {
    gpool::allocator::ServiceOptions opt = cl.serviceOptions(argv);
    if (std::getenv(kRestarted) && cl.store.rfind("etcd://", 0) == 0) waitForStore(cl.store, cl.etcd_access);
    gpool::allocator::Service service(opt);
    int bound = service.start(host, port);
    spdlog::info("listening on {}://{}:{}{} (state in {}, admin key {}, token key {}: GPU hosts verify with {})",
                 cl.tls_cert.empty() ? "http" : "https", host, bound, cl.socket.empty() ? "" : " and unix:" + cl.socket, opt.db_path,
                 cl.key_file, cl.token_key, gpool::token::Ed25519Key::publicPath(cl.token_key));
    g_serving = true;
    int sig = stop.get();
    spdlog::info("signal {}: stopping (state is in {})", sig, cl.store.empty() ? cl.db : cl.store);
    service.stop();
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A replica started again closes whatever its former image left open: close_range marked every
  // descriptor close-on-exec, but one that a thread accepted or opened just after (httplib accepts without
  // SOCK_CLOEXEC) would outlive the exec, and its client would wait on a connection nobody serves.
  if (std::getenv(kRestarted)) ::close_range(3, ~0U, 0);
  CLI::App app{
      "gpool-allocator: grants whole or fractional GPUs of the registered gpool-servers as leases.\n"
      "Clients (gpool run, or a program with GPOOL_ALLOCATOR=http://HOST:PORT) ask it for leases;\n"
      "gpool-servers register with it (gpool-server --allocator URL --token-key TOKEN.pub --server-key KEY.pem), once an\n"
      "admin enrolled their keys (gpool admin server enroll NAME KEY.pub)."};
  CommandLine cl;
  cl.declare(app);
  CLI11_PARSE(app, argc, argv);

  gpool::daemon::startLog("gpool-allocator", cl.log_level);

  std::string host;
  uint16_t port = 0;
  if (!gpool::proto::parseHostPort(cl.listen, host, port)) {
    spdlog::critical("malformed --listen '{}': expected IP:PORT, such as 127.0.0.1:7430", cl.listen);
    return 2;
  }
  raiseOpenFileLimit(cl.max_connections);
  // A peer that closes a TLS connection (an API client mid-answer, an etcd member refusing a handshake)
  // must cost only that connection: OpenSSL writes with write(), and SIGPIPE would end the allocator.
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // in every thread: watchStopSignals takes them
  std::future<int> stop = watchStopSignals(stop_signals);
  return serve(cl, host, port, stop, argv);
}
