// Which user each lease's workers run as (gpool-server --worker-uids FIRST-LAST). Each lease served here
// gets a uid of the range for itself while it has workers or held memory here; its workers become that
// user (and the group of the same number) before they read a byte from their client. So a worker that its
// client took over can neither read the server's key, nor signal, trace or read another lease's workers,
// nor file IPC records in another lease's name. Clients without a lease (a server with no allocator)
// share the range's first uid.
//
// Before a uid serves a lease, once a lease lets it go, at start and at exit, every process still running as
// it is killed (whatever a worker taken over left behind could otherwise use the GPU outside any lease, or
// wait for the next lease given the uid) and its IPC record directory is emptied. So each gpool-server of a
// host needs a range of its own.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace gpool::server {

class WorkerUsers {
 public:
  struct Range {
    uid_t first = 0, last = 0;
  };
  static constexpr uid_t kMaxRange = 4096;  // more than a server ever serves at once (--max-clients <= 256)
  // "FIRST-LAST", or one uid; nullopt, with why, when malformed, including uid 0, or more than kMaxRange.
  static std::optional<Range> parse(const std::string& text, std::string& why);
  // Throws std::runtime_error, naming the fix, when this process is not root or a uid of the range is an
  // account's (the range must be gpool's alone: its processes are killed).
  // Every uid of the range is cleared (below) first, and those in use again when this ends.
  explicit WorkerUsers(Range range);
  ~WorkerUsers();
  WorkerUsers(const WorkerUsers&) = delete;
  WorkerUsers& operator=(const WorkerUsers&) = delete;

  // The uid `lease`'s workers run as ("": clients without a lease), taken at its first worker; nullopt when
  // every uid of the range serves another lease.
  std::optional<uid_t> take(const std::string& lease);
  // The lease has neither workers nor held memory here any more: its uid is free again (returned, once
  // cleared; nullopt when the lease had none).
  std::optional<uid_t> release(const std::string& lease);
  uid_t first() const { return range_.first; }
  uid_t last() const { return range_.last; }
  size_t size() const { return range_.last - range_.first + 1; }
  size_t inUse() const { return by_lease_.size(); }

  // Kills every process running as `uid` (not this one) and empties its IPC record directory.
  static void clear(uid_t uid);
  // Makes `dir` (the host's module cache, which every lease's workers share) for the workers' users: made
  // when missing and open to every user (its images are checked against their names whenever read, so a
  // worker can spoil none, only make one sent again). Throws std::runtime_error, naming the fix, when a
  // directory above it is closed to other users.
  static void shareDirectory(const std::string& dir);
  // The first directory above `path` that the range's users cannot pass through (no search bit for others),
  // or "" when none is.
  static std::string closedAbove(const std::filesystem::path& path);

 private:
  Range range_;
  std::map<std::string, uid_t> by_lease_;
};

}  // namespace gpool::server
