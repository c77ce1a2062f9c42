// Where a lease's GPU time is checked from outside its workers. Each worker holds its lease's kernels to
// the lease's share of the GPU's time (compute_share.h), on a pace kept in a page its workers can write: a
// worker taken over by its client could lower that pace, or launch with the driver itself, and take more of
// the GPU than its share. And a kernel, once started, runs to its end: one long kernel holds the GPU from
// the lease's neighbours for as long as it runs, and the lease only waits it off afterwards.
// So gpool-server also reads the device time the driver counts each process taking (device_use.h), and
// keeps for each lease below a whole GPU, on each device, how far ahead of its share it is: what its
// processes took, less its share of the time that passed, never below 0 (a lease at its share stays near 0;
// an idle one pays back at its share's rate). A lease more than the limit (--compute-audit) ahead on a
// device has its processes ended; one past half of it is named in the log first.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "device_use.h"  // (ProcessBusy, DeviceProcess)

namespace gpool::server {

class ComputeAudit {
 public:
  struct Share {
    int number = 0;       // in the lease's tokens
    double fraction = 1;  // of its GPU's time (1: a whole GPU, which is not audited)
    int device = 0;       // the GPU it is on, as gpool-server numbers them
  };
  struct Lease {
    std::string id;
    std::vector<pid_t> workers;       // its workers here
    std::vector<Share> shares;        // the share each of them serves
    std::optional<uid_t> uid;         // --worker-uids: the user its workers run as
  };
  struct Finding {
    std::string lease;
    int device = 0;
    double fraction = 0;           // its shares' on that device
    int64_t ahead_ns = 0;          // device time taken past its share there
    bool over = false;             // past the limit: `processes` are to be ended; else past half of it
    std::vector<pid_t> processes;  // those that took its time there, and its workers
  };

  explicit ComputeAudit(int64_t limit_ns) : limit_ns_(limit_ns) {}

  // `busy`: what each process took over the last `elapsed_ns`, on each device. A lease's share on a device
  // is that of its shares there (a context its worker made on another GPU brings no share with it: time there
  // is all ahead). Returns the leases past the limit, and those past half of it for the first time.
  std::vector<Finding> audit(const ProcessBusy& busy, int64_t elapsed_ns, const std::vector<Lease>& leases);

  // How far ahead of its share each audited lease is, on its device most ahead (for /metrics).
  std::map<std::string, int64_t> ahead() const;

 private:
  struct State {
    int64_t ahead_ns = 0;
    double fraction = 0;
    bool warned = false;  // past half the limit, and said so
  };
  using Key = std::pair<std::string, int>;  // (lease, device)
  static std::map<Key, double> fractions(const std::vector<Lease>& leases);
  int64_t limit_ns_;
  std::map<Key, State> state_;
};

}  // namespace gpool::server
