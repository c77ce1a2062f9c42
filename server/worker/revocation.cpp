// The worker's end when its lease ends (revocation.h).
#include "revocation.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
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

Revocation& Revocation::watch() {
  sigset_t set = termOnly();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  static Revocation* const watcher = new Revocation;  // outlives main: its thread may run until exit
  static const bool started = [] {
    std::thread([] { watcher->loop(); }).detach();
    return true;
  }();
  (void)started;
  return *watcher;
}

void Revocation::serving(Dispatcher* d) {
  std::unique_lock lock(mu_);
  serving_ = d;
  if (d && revoked_) stop();
  if (!d) served_.notify_all();
}

void Revocation::loop() {
  const sigset_t set = termOnly();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    std::unique_lock lock(mu_);
    if (revoked_) {
      spdlog::info("SIGTERM again: this worker already stopped serving its client");
      continue;
    }
    revoked_ = true;
    if (!serving_) {
      spdlog::info("its lease ended (SIGTERM) while it serves no client");
      continue;
    }
    stop();
    // The dispatcher may be inside a driver call: it gets kStopGraceMs to return from it.
    if (served_.wait_for(lock, std::chrono::milliseconds(kStopGraceMs), [this] { return serving_ == nullptr; })) continue;
    spdlog::error("still inside a driver call {} ms after its lease ended; ending now (memory other processes "
                  "imported from it is no longer counted for its lease)",
                  kStopGraceMs);
    ::_exit(1);
  }
}

void Revocation::stop() {
  spdlog::info("its lease ended at the allocator (SIGTERM): no longer serving the client");
  serving_->stop();
}

}  // namespace gpool::worker
