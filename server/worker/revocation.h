// Where a worker learns that its lease ended: gpool-server sends it SIGTERM (listener.cpp, revoke). A
// worker serving its client then stops serving (Dispatcher::stop shuts the connection down) and ends the
// way one whose client left does: at once, or once other processes let go of memory they imported from it
// (import_holds.h), so that its lease's share stays held at the allocator for as long as the GPU's memory
// is. A worker still inside a driver call (a kernel that does not end) kStopGraceMs after SIGTERM ends then;
// gpool-server then keeps its lease charged for what other processes hold of its memory (held_exports.h).
// SIGTERM from another process (an init system stopping the whole service) does the same, and the worker
// says who sent it. gpool-server's SIGTERM may carry why it stops the worker (gpool/worker_stop.h: an audit
// found its lease past its cap or share), which the worker tells its client instead.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <condition_variable>
#include <mutex>
#include <string>

namespace gpool::worker {

class Dispatcher;

class Revocation {
 public:
  static constexpr int kStopGraceMs = 10000;

  // Blocks SIGTERM in the calling thread, and so in every thread started after; `server` is the
  // gpool-server whose SIGTERM means the lease ended. Call once, early in main, before any other thread
  // starts. Never destroyed. A SIGTERM that comes before start() waits for it.
  static Revocation& watch(pid_t server);
  // Waits for SIGTERM in a thread of its own from now on (once; the worker calls it in its sandbox, which
  // binds only the threads started after it is entered).
  void start();
  // `d` serves from now on (null: it stopped): SIGTERM stops it; one that came already stops it now.
  void serving(Dispatcher* d);

 private:
  explicit Revocation(pid_t server) : server_(server) {}
  void loop();
  void stop();  // (mu_ held, serving_ and why_ set)
  std::string reasonOf(const siginfo_t& info) const;

  std::mutex mu_;
  std::condition_variable served_;
  const pid_t server_;
  Dispatcher* serving_ = nullptr;
  std::string why_;  // why it stops serving: empty until SIGTERM came
  std::once_flag started_;
  bool exiting_ = false;  // the process is ending: a SIGTERM now does nothing (spdlog's loggers go with it)
};

}  // namespace gpool::worker
