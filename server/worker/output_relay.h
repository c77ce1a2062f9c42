// The worker's standard output, relayed to its client (protocol kMsgOutput, calls.h). A GPU's printf and
// assert write to the standard output of the process that owns the context, which is this worker, on the
// GPU host: without this, what a kernel prints never reaches the user. The worker's fd 1 becomes a pipe;
// a thread keeps the pipe drained (the driver must never block on it), holding what it read; before each
// reply, the dispatcher sends what was written since, so it arrives in the order the program saw it.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpool/protocol/transport.h"

namespace gpool::worker {

class OutputRelay {
 public:
  // Reads what is written to the pipe whose read end is `read_fd` (which it owns), from a thread of its own
  // started now or, with `start_now` false, at start(). Tests pass their own.
  explicit OutputRelay(int read_fd, bool start_now = true);
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // Makes this process's fd 1 a pipe that a relay reads; nullptr (and fd 1 as it was) where it cannot.
  // Its thread not started yet (start()): the worker starts it once in its sandbox, which binds only the
  // threads started after it is entered.
  static std::unique_ptr<OutputRelay> captureStdout();
  void start();

  void enable() { enabled_ = true; }  // the client asked for it (called on the thread that sends)
  // Sends what was written since the last call as kMsgOutput frames (none when nothing was, or before
  // enable()). The caller holds the connection's send lock.
  void sendPending(proto::Transport& t);

  static constexpr size_t kMaxHeld = 8u << 20;  // held for a client that does not ask; beyond, counted and dropped

 private:
  void readAvailable();  // under mu_
  void loop();

  int read_fd_ = -1, stop_fd_ = -1;
  bool enabled_ = false;
  std::mutex mu_;
  std::vector<uint8_t> held_;
  uint64_t dropped_ = 0;
  std::thread thread_;
};

}  // namespace gpool::worker
