// Where a worker learns that its lease ended: gpool-server sends it SIGTERM (listener.cpp, revoke). A
// worker serving its client then stops serving (Dispatcher::stop shuts the connection down) and ends the
// way one whose client left does: at once, or once other processes let go of memory they imported from it
// (import_holds.h), so that its lease's share stays held at the allocator for as long as the GPU's memory
// is. A worker still inside a driver call (a kernel that does not end) kStopGraceMs after SIGTERM ends then.
#pragma once

#include <condition_variable>
#include <mutex>

namespace gpool::worker {

class Dispatcher;

class Revocation {
 public:
  static constexpr int kStopGraceMs = 10000;

  // Blocks SIGTERM in the calling thread, and so in every thread started after, and waits for it in a
  // thread of its own. Call once, early in main, before any other thread starts. Never destroyed.
  static Revocation& watch();
  // `d` serves from now on (null: it stopped): SIGTERM stops it; one that came already stops it now.
  void serving(Dispatcher* d);

 private:
  Revocation() = default;
  void loop();
  void stop();  // (mu_ held, serving_ set)

  std::mutex mu_;
  std::condition_variable served_;
  Dispatcher* serving_ = nullptr;
  bool revoked_ = false;
};

}  // namespace gpool::worker
