// gpool-server: what happens when a worker ends: reaping it, ending what it left running, the memory other
// processes still hold of it, and when its lease's share here is free again.
#include "server_class.h"

#include <cerrno>
#include <thread>

namespace gpool::server {

// The lease's last worker here ended.
void Server::forgetShares(const std::string& lease) {
  std::erase_if(shares_, [&](const auto& s) { return s.first.first == lease; });
}

void Server::watchChildren() {
  children_.async_wait([this](const asio::error_code& ec, int) {
    if (ec) return;
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      if (!workers_by_pid_.count(pid)) {  // (a process a worker left, now the server's child: leftover_processes.h)
        ended_leftovers_.erase(pid);
        continue;
      }
      workerEnded(pid);
      if (WIFSIGNALED(status))
        spdlog::warn("worker {} died with signal {}", pid, WTERMSIG(status));
      else
        spdlog::debug("worker {} exited with {}", pid, WEXITSTATUS(status));
    }
    endLeftovers();
    if (draining_ && workers_ == 0) {
      spdlog::info("the last worker finished; shutting down");
      return io_.stop();
    }
    watchChildren();
  });
}

// Kills the server's children that are not workers: processes workers left running (leftover_processes.h).
void Server::endLeftovers() {
  for (pid_t pid : leftovers([this](pid_t p) { return workers_by_pid_.count(p) > 0; })) {
    if (!ended_leftovers_.insert(pid).second) continue;  // (killed already; not reaped yet)
    spdlog::warn("process {} ({}), which a worker left running, is killed: gpool-server starts nothing but workers",
                 pid, commandOf(pid));
    ::kill(pid, SIGKILL);
  }
}

// gpool-server stops: the workers that still run are killed, and what they leave as they end. A worker ends
// with its server by itself (PR_SET_PDEATHSIG), but one its client took over may have undone that: it would run
// on with the GPU, outside any lease, with no server left to answer for it. The server's children are not
// reaped before they are killed, so no pid here can be another process's. Gives up after 2 s (a process that
// forks faster than this kills), saying what still runs.
void Server::endWorkers() {
  if (!workers_by_pid_.empty()) spdlog::info("stopping {} worker{}", workers_by_pid_.size(), workers_by_pid_.size() == 1 ? "" : "s");
  for (const auto& [pid, worker] : workers_by_pid_) ::kill(pid, SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t pid = ::waitpid(-1, nullptr, WNOHANG);
    if (pid < 0 && errno == ECHILD) return;  // (none left: what the workers left was reaped too)
    if (pid > 0) {
      workers_by_pid_.erase(pid);
      ended_leftovers_.erase(pid);
      continue;
    }
    endLeftovers();  // (a worker's own processes are this server's children once it ended)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  spdlog::warn("{} process(es) that workers started still run after 2 s of killing them", leftovers([](pid_t) { return false; }).size());
}

// A worker ended: the driver freed its memory, so its slots are free again, but for what other processes
// still hold of the memory it exported, which stays charged to its lease and keeps the lease served here
// until they let go (held_exports.h).
void Server::workerEnded(pid_t pid) {
  if (workers_ > 0) --workers_;
  Worker w{"", -1, ::getuid()};
  if (auto it = workers_by_pid_.find(pid); it != workers_by_pid_.end()) w = std::move(it->second), workers_by_pid_.erase(it);
  const std::string& lease = w.lease;
  const int slot = w.slot;
  const uid_t uid = w.uid;
  uint64_t held = slot >= 0 ? held_exports_.adopt({pid, lease, slot, uid, w.seal}) : 0;
  forEachBudget(lease, [&](budget::SharedBudget& b) { b.reclaimAllBut(slot, held); });
  if (sim_busy_ && slot >= 0) sim_busy_->reclaim(slot);  // (the next worker in the slot counts from 0)
  if (held) {
    spdlog::info("worker {} ended while other processes hold {} bytes of memory it exported; {} stays charged for them "
                 "until they let go", pid, held, lease.empty() ? "its slot" : "lease " + lease);
    watchHeldExports();
  }
  if (lease.empty()) return leaveIfDone(lease);
  if (auto page = launch_pages_.find(lease); page != launch_pages_.end() && slot >= 0) {
    ended_launches_[lease] += page->second->heldBy(slot);
    page->second->reclaim(slot);  // (counted: the slot is free for the lease's next worker)
  }
  leaveIfDone(lease);
  reportServing();
}

// What the server keeps for a lease with nothing here: its shares and pages, its launch count, and with
// --worker-uids its user (whose processes are killed, and the uid freed for another lease: worker_users.h),
// with the JIT cache lent to it (given back before the uid serves another lease: jit_caches.h).
void Server::forgetLease(const std::string& lease) {
  forgetShares(lease);
  ended_launches_.erase(lease);
  launch_pages_.erase(lease);
  if (!worker_users_) return;
  std::optional<uid_t> uid = worker_users_->release(lease);
  if (uid && jit_caches_) jit_caches_->giveBack(*uid, *uid);
}

// Once the lease has no worker here and nothing of it is held, its share is free at the allocator.
void Server::leaveIfDone(const std::string& lease) {
  if (!nothingHere(lease)) return;
  forgetLease(lease);
  if (link_ && !lease.empty()) link_->released(lease);
}

void Server::watchHeldExports() {
  if (watching_held_) return;
  watching_held_ = true;
  held_poll_.expires_after(std::chrono::milliseconds(kHeldPollMs));
  held_poll_.async_wait([this](const asio::error_code& ec) {
    watching_held_ = false;
    if (ec) return;
    settleHeldExports();
    if (!held_exports_.empty()) watchHeldExports();
  });
}

void Server::settleHeldExports() {
  auto done = held_exports_.settle([this](const HeldExports::Ended& e, uint64_t bytes) {
    forEachBudget(e.lease, [&](budget::SharedBudget& b) { b.release(e.slot, bytes); });
  });
  for (const HeldExports::Ended& e : done) {
    forEachBudget(e.lease, [&](budget::SharedBudget& b) { b.reclaim(e.slot); });
    spdlog::info("the other processes let go of the memory worker {} exported{}", e.worker,
                 e.lease.empty() ? "" : "; lease " + e.lease + " no longer pays for it");
    leaveIfDone(e.lease);
  }
  if (!done.empty()) reportServing();
}
}  // namespace gpool::server
