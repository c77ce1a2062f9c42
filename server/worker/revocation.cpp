// The worker's end when its lease ends (revocation.h).
#include "revocation.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "dispatcher.h"

namespace gpool::worker {

namespace {

sigset_t termOnly() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

// gpool-server's SIGTERM: its lease ended, or with a value queued (sigqueue), what else the server ended it for.
std::string Revocation::reasonOf(const siginfo_t& info) const {
  if (info.si_pid != server_)
    return "gpool-worker was stopped (SIGTERM from process " + std::to_string(info.si_pid) + ", not its gpool-server)";
  const char* why = info.si_code == SI_QUEUE ? workerStopReason(info.si_value.sival_int) : nullptr;
  return why ? why : kLeaseEndedReason;
}

Revocation& Revocation::watch(pid_t server) {
  sigset_t set = termOnly();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  static Revocation* const watcher = new Revocation(server);  // never destroyed: its thread may run until exit
  // Run at exit before spdlog's registry (made earlier) is destroyed: a SIGTERM that comes while the
  // process ends then logs nothing, instead of logging through a logger already freed.
  static const bool quiet_at_exit = std::atexit([] {
    std::lock_guard lock(watcher->mu_);
    watcher->exiting_ = true;
  }) == 0;
  (void)quiet_at_exit;
  return *watcher;
}

void Revocation::start() {
  std::call_once(started_, [this] { std::thread([this] { loop(); }).detach(); });
}

void Revocation::serving(Dispatcher* d) {
  std::unique_lock lock(mu_);
  serving_ = d;
  if (d && !why_.empty()) stop();
  if (!d) served_.notify_all();
}

void Revocation::loop() {
  const sigset_t set = termOnly();
  for (;;) {
    siginfo_t info{};
    if (sigwaitinfo(&set, &info) != SIGTERM) continue;
    std::unique_lock lock(mu_);
    if (exiting_) continue;
    if (!why_.empty()) {
      spdlog::info("SIGTERM again: this worker already stopped serving its client");
      continue;
    }
    why_ = reasonOf(info);
    if (!serving_) {
      spdlog::info("{}, while it serves no client", why_);
      continue;
    }
    stop();
    // The dispatcher may be inside a driver call: it gets kStopGraceMs to return from it.
    if (served_.wait_for(lock, std::chrono::milliseconds(kStopGraceMs), [this] { return serving_ == nullptr; })) continue;
    spdlog::error("still inside a driver call {} ms after SIGTERM; ending now (gpool-server keeps its lease charged "
                  "for memory other processes imported from it, until they let go)",
                  kStopGraceMs);
    ::_exit(1);
  }
}

void Revocation::stop() {
  spdlog::info("{}: no longer serving the client", why_);
  serving_->stop(why_);
}

}  // namespace gpool::worker
