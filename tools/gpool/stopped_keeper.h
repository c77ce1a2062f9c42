// Ctrl-Z on `gpool run`: the terminal stops the command and gpool together (one process group), and a
// stopped gpool sends no heartbeat, so its lease would expire within the policy's lease_ttl and `fg` would
// find the program's GPUs gone. A keeper process, forked when the command starts, heartbeats the lease
// while (and only while) gpool is stopped, as a suspended process keeps its GPU on a machine of its own.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "allocator_client.h"

namespace gpool::cli {

class StoppedKeeper {
 public:
  // Forks the keeper for lease `id` (heartbeats every `every_ms` while this process is stopped). Only from
  // a single-threaded gpool (a forked copy of a threaded one may not use what another thread held): none
  // is started otherwise.
  StoppedKeeper(const AllocatorClient& a, const std::string& id, int every_ms);
  ~StoppedKeeper();  // ends it
  StoppedKeeper(const StoppedKeeper&) = delete;
  StoppedKeeper& operator=(const StoppedKeeper&) = delete;
  pid_t pid() const { return pid_; }  // 0: none

 private:
  pid_t pid_ = 0;
};

}  // namespace gpool::cli
