// Where memory an ended worker exported stays charged while other processes still hold it. CUDA keeps
// memory another process imported alive until every importer lets go, also after its exporter ended. A
// worker whose client left waits for its importers itself (the worker's import_holds.h); one that ended
// first (killed, crashed, or ended by its bound after its lease: revocation.h) leaves its export records
// behind (export_records.h), and gpool-server takes them over here: its lease's share stays charged for
// what importers hold, in the ended worker's slot, and stays held at the allocator, until they let go.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "export_records.h"

namespace gpool::server {

class HeldExports {
 public:
  struct Ended {
    pid_t worker = 0;
    std::string lease;  // empty for a server without an allocator
    int slot = -1;      // its slot in the shared budgets, kept while importers hold its memory
    uid_t uid = getuid();  // the user it ran as (gpool-server --worker-uids), whose records are its
    budget::RecordSeal seal{};  // the seal its records carry (export_records.h)
  };

  // Takes over what `ended` exported that importers still hold; returns the bytes its lease pays for them
  // (0: nothing is held, nothing is kept).
  uint64_t adopt(const Ended& ended);
  // Lets go of what importers no longer hold: `released(ended, bytes)` for each, then returns the ended
  // workers nothing of which is held any more.
  std::vector<Ended> settle(const std::function<void(const Ended&, uint64_t)>& released);

  bool empty() const { return held_.empty(); }
  bool holdsSlot(int slot) const;
  bool holdsFor(const std::string& lease) const;
  std::vector<std::string> leases() const;  // each lease something is held for, once

 private:
  struct Held {
    Ended ended;
    std::vector<budget::HeldRecord> records;
  };
  std::vector<Held> held_;
};

}  // namespace gpool::server
