// A worker's standard error, in gpool-server's log as that worker's words. A worker runs what its client
// sends, and one its client took over could write anything there: a line that reads as the server's own
// ("lease L ended", "worker N died"), a terminal escape sequence, a flood. So a worker's descriptor 2 is a
// pipe to the server, which logs each line under the worker's pid and lease as the server knows them (not
// as the line says), its bytes made printable (gpool/printable.h), at most kLongestLine of it, at the level
// the worker's own log line names, or as a warning when it does not read as one. A worker writing more than
// kBytesPerSecond on average (after kSavedBytes at once) is read no further until its pace allows: its
// writes wait, and the server's log and CPU stay the others'.
#pragma once

#include <spdlog/spdlog.h>
#include <sys/types.h>

#include <asio.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace gpool::server {

class WorkerLog : public std::enable_shared_from_this<WorkerLog> {
 public:
  static constexpr size_t kLongestLine = 4096;         // of one line's bytes, what is logged; the rest is counted
  static constexpr double kBytesPerSecond = 1 << 20;   // what one worker may write on average
  static constexpr double kSavedBytes = 8 << 20;       // what it may write at once, having written little

  // Relays what is written to `read_fd` (which it owns from then on) as the words of worker `pid`, serving
  // `lease` ("": a client without a lease), until every writer closed it; the relay keeps itself alive.
  static void relay(asio::io_context& io, int read_fd, pid_t pid, const std::string& lease);

  struct Line {
    spdlog::level::level_enum level;
    std::string text;  // printable, without the worker's own time, level and name
  };
  // What the server logs for one line a worker wrote (without its newline): a line of the worker's own
  // log ("2026-12-02 10:00:00.123 info gpool-worker[PID] words") keeps its level and words; any other
  // is a warning, whole.
  static Line read(std::string_view line);

  WorkerLog(asio::io_context& io, int read_fd, pid_t pid, const std::string& lease);

 private:
  void readMore();
  void take(std::string_view bytes);  // splits what came into lines, and logs each whole one
  void logLine();
  void pace(size_t bytes);            // reads on now, or once the worker's pace has paid for `bytes`

  asio::posix::stream_descriptor pipe_;
  asio::steady_timer wait_;
  std::string who_;      // "worker PID (lease L)"
  std::string line_;     // the line being read, up to kLongestLine
  size_t cut_ = 0;       // bytes of it past kLongestLine, not kept
  double saved_ = kSavedBytes;
  std::chrono::steady_clock::time_point saved_at_ = std::chrono::steady_clock::now();
  bool said_slow_ = false;
  char buffer_[16384];
};

}  // namespace gpool::server
