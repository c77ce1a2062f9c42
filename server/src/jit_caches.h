// Where each lease's user gets a JIT cache of their own. NVIDIA's driver keeps what it compiled of a
// program's PTX in a cache directory (CUDA_CACHE_PATH) and loads an entry there in place of compiling the
// same PTX again, with nothing that checks the entry against its source: in a cache two users' workers
// share, a worker taken over by one user's client could plant code that the other's program then runs.
// gpool-server gives each lease's workers the directory of the lease's user (as its lease token names them)
// under --jit-cache, made here, and a worker's sandbox lets it reach that directory alone
// (server/worker/worker_sandbox.h). A client without a lease, or with a token that names no user, gets none:
// its worker compiles PTX at each load. The driver bounds each cache (CUDA_CACHE_MAXSIZE); the users' caches
// together are bounded here, the least recently used going whole first.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gpool::server {

class JitCaches {
 public:
  // Makes `root` (mode 0700) when missing. Throws std::runtime_error, naming the fix, when it cannot be
  // made or is not a directory of this process's user. `max_bytes`: what all users' caches may hold (bound()).
  JitCaches(std::filesystem::path root, uint64_t max_bytes);

  // `user`'s directory, made (mode 0700) when missing, and marked used now; nullopt with `why` when it cannot
  // be made, or when something else (a file, a link) is in its place.
  std::optional<std::filesystem::path> of(const std::string& user, std::string& why) const;

  struct Removed {
    std::vector<std::string> users;  // their directories' names, least recently used first
    uint64_t bytes = 0;
  };
  // Holds the caches to `max_bytes` together: while they hold more, removes the least recently used user's
  // cache (the one given to a worker longest ago) but those of `in_use` (directory names: users whose workers
  // run). What was removed.
  Removed bound(const std::set<std::string>& in_use) const;

  // The name of `user`'s directory: the name itself where it holds only letters, digits, '-', '_' and '.'
  // (not first), and each other byte as %XX otherwise, so that no two users share one and none leaves `root`.
  static std::string directoryName(const std::string& user);

  const std::filesystem::path& root() const { return root_; }

 private:
  std::filesystem::path root_;
  uint64_t max_bytes_;
};

}  // namespace gpool::server
