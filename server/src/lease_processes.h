// Whose a process on the GPU is. gpool-server checks each lease's use of its GPU from outside its workers
// (memory_audit.h, compute_audit.h): what the driver counts, it counts by process, and a lease's processes
// here are its workers, their descendants (by /proc's parent links: what a worker started, even one taken
// over by its client), and with --worker-uids every process of the lease's own uid.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <unordered_map>
#include <vector>

namespace gpool::server {

class ProcessOwners {
 public:
  // `leases`: anything with `workers` (pids) and `uid` (optional) for each lease; a process is owned by
  // the lease at its index.
  template <class Leases>
  explicit ProcessOwners(const Leases& leases) {
    for (size_t i = 0; i < leases.size(); ++i) add(i, leases[i].workers, leases[i].uid);
  }
  // The index of the lease `process` belongs to: a worker's, a worker's descendant's, or its uid's.
  std::optional<size_t> of(pid_t process) const;

 private:
  void add(size_t lease, const std::vector<pid_t>& workers, std::optional<uid_t> uid);
  std::unordered_map<pid_t, size_t> by_worker_;
  std::unordered_map<uid_t, size_t> by_uid_;
};

}  // namespace gpool::server
