// Where each lease's user gets a JIT cache of their own. NVIDIA's driver keeps what it compiled of a
// program's PTX in a cache directory (CUDA_CACHE_PATH) and loads an entry there in place of compiling the
// same PTX again, with nothing that checks the entry against its source: in a cache two users' workers
// share, a worker taken over by one user's client could plant code that the other's program then runs.
// gpool-server gives each lease's workers the directory of the lease's user (as its lease token names them)
// under --jit-cache, made here, and a worker's sandbox lets it reach that directory alone
// (server/worker/worker_sandbox.h). A client without a lease, or with a token that names no user, gets none:
// its worker compiles PTX at each load. The driver bounds each cache (CUDA_CACHE_MAXSIZE); the users' caches
// together are bounded here, the least recently used going whole first.
//
// With --worker-uids, a lease's workers run as a uid of its own, and a user's leases may be several uids at
// once: a cache is lent to one uid at a time (lend), its owner while that lease runs, and given back to the
// server's user when the uid is freed (giveBack), before the uid serves another lease. While nobody holds
// it, it is the server's (mode 0700), so no uid reaches what is inside. A user whose leases run here at once
// has a cache for each, up to kCachesPerUser: the first named as above, the others with "+2", "+3"... after
// it (a '+' no user's name leaves as it is: directoryName); each begins empty, and --jit-cache-max bounds
// them all as one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <sys/types.h>

namespace gpool::server {

class JitCaches {
 public:
  static constexpr int kCachesPerUser = 8;  // (with --worker-uids: one for each of a user's leases at once)

  // Makes `root` (mode 0700) when missing. Throws std::runtime_error, naming the fix, when it cannot be
  // made or is not a directory of this process's user. `max_bytes`: what all users' caches may hold (bound()).
  // `for_worker_uids`: the root is mode 0711 (other users pass through it, list nothing), and each
  // directory above it must let other users pass (else it throws, naming the fix).
  JitCaches(std::filesystem::path root, uint64_t max_bytes, bool for_worker_uids = false);

  // `user`'s directory, made (mode 0700) when missing, and marked used now; nullopt with `why` when it cannot
  // be made, or when something else (a file, a link) is in its place.
  std::optional<std::filesystem::path> of(const std::string& user, std::string& why) const;

  // A directory of `user`'s lent to `uid`: the one lent to it already (another worker of the same lease), or
  // else the first that no uid holds (of() for the first; each of the user's other leases here holds one).
  // It and what it holds become `uid`'s (directories and files with one link; what else is there stays as
  // it is), until giveBack. nullopt with `why` when kCachesPerUser of the user's leases hold theirs, or the
  // directory cannot be made or is not the server's (as of()).
  std::optional<std::filesystem::path> lend(const std::string& user, uid_t uid, std::string& why);
  // The caches lent to a uid from `first` to `last` are the server's user's again (mode 0700). Call once no
  // process runs as them. Caches found so at start (a server before this one ended) are given back too.
  void giveBack(uid_t first, uid_t last);

  struct Removed {
    std::vector<std::string> users;  // their directories' names, least recently used first
    uint64_t bytes = 0;
  };
  // Holds the caches to `max_bytes` together: while they hold more, removes the least recently used user's
  // cache (the one given to a worker longest ago) but those of `in_use` (directory names: users whose workers
  // run) and those lent. What was removed.
  Removed bound(const std::set<std::string>& in_use) const;

  // The name of `user`'s directory: the name itself where it holds only letters, digits, '-', '_' and '.'
  // (not first), and each other byte as %XX otherwise, so that no two users share one and none leaves `root`.
  static std::string directoryName(const std::string& user);

  const std::filesystem::path& root() const { return root_; }

 private:
  // `name`'s directory under the root, made when missing, marked used now; nullopt with `why` (naming `user`).
  std::optional<std::filesystem::path> ownCache(const std::string& name, const std::string& user, std::string& why) const;
  // The cache named `name` (the server's) made `uid`'s, and recorded as lent.
  std::optional<std::filesystem::path> lendDirectory(const std::string& name, const std::string& user, uid_t uid, std::string& why);

  std::filesystem::path root_;
  uint64_t max_bytes_;
  std::map<std::string, uid_t> lent_;  // directory name → the uid that holds it
};

}  // namespace gpool::server
