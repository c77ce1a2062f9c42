// What this process asked of its workers, request by request: how many it sent without waiting, how many
// it waited for (round trips) and how long, and the bytes each way. Counted only when GPOOL_PROFILE is set,
// and written when the process exits (docs/user.md, "Where the time goes"): the first thing to look at
// when a program is slower through gpool than natively.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace gpool::client::profile {

// Whether GPOOL_PROFILE is set (read once): `1` or `stderr` writes the table to standard error at exit,
// anything else is a file it is appended to, `%p` in it replaced by the process id.
bool enabled();

// A request sent without waiting (bytes: its frame, header included).
void posted(uint16_t msg, size_t bytes);
// A request the caller waited for: bytes sent and received, and the wait from sending to the reply.
void waited(uint16_t msg, size_t sent, size_t received, std::chrono::nanoseconds wait);

// Times one waited request when profiling; does nothing otherwise.
class WaitTimer {
 public:
  WaitTimer() : on_(enabled()) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  void done(uint16_t msg, size_t sent, size_t received) const {
    if (on_) waited(msg, sent, received, std::chrono::steady_clock::now() - start_);
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace gpool::client::profile
