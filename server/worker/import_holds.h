// Where memory shared between processes stays charged while anyone holds it. CUDA keeps memory another
// process imported (an IPC handle, physical memory from a shareable handle, a shared pool's allocation)
// alive until every importer lets go, even after its exporter freed it or ended. Its exporter's lease pays
// for it until then, so that exporting, importing and freeing cannot take a lease past its memory cap:
//  - ImportHolds, in an importing worker: for each export it holds, the export's record file, open with a
//    shared lock (ipc_registry.h); closed when its client closes or frees what it imported, releases the
//    imported handle, or resets its context, and by the kernel when the worker ends, however it ends.
//  - FreedWhileImported, in an exporting worker: memory its client freed while importers held it, still
//    charged to the lease (memory_ledger.h) until they let go (and, for physical memory the client still
//    maps, until its last mapping went too: counted once either way).
// A worker whose client ends while others hold its memory stays, with its lease charged for what they hold,
// until they let go (Dispatcher::waitForImporters); it frees everything else first (client_departure.cpp).
// A worker that ends first (killed, say) leaves that to gpool-server (server/src/held_exports.h).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "handle_table.h"
#include "ipc_registry.h"
#include "memory_ledger.h"

namespace gpool::worker {

// What an export shares: an allocation (an IPC handle's, or a shared pool's) or physical memory.
enum class Shared : uint8_t { kAllocation, kPhysical };

class ImportHolds {
 public:
  // Holds `object` (this worker's handle or address of what it imported) through `file`. An object
  // imported twice (the driver hands out the same address again) is held until it was let go twice.
  void keep(Shared kind, uint64_t object, IpcRegistry::RecordFile file) {
    if (file) held_.emplace(std::make_pair(kind, object), std::move(file));
  }
  void letGo(Shared kind, uint64_t object) {
    if (auto it = held_.find({kind, object}); it != held_.end()) held_.erase(it);
  }
  void clear() { held_.clear(); }

 private:
  std::multimap<std::pair<Shared, uint64_t>, IpcRegistry::RecordFile> held_;
};

class FreedWhileImported {
 public:
  FreedWhileImported(MemoryLedger& ledger, const HandleTable& table) : ledger_(ledger), table_(table) {}
  // `bytes` the client freed while importers hold them (`file`, its export's record): charged until they
  // let go. Called before the ledger gives the freed bytes back, so that the lease's count never dips.
  void keep(IpcRegistry::RecordFile file, uint64_t bytes);
  // Physical memory `physical` the client released while it still maps it: its `bytes`, counted already,
  // stay counted until the importers let go and the client's last mapping of it went, whichever is later
  // (the table no longer charges the mappings for it: HandleTable::uncharge).
  void keepMapped(IpcRegistry::RecordFile file, uint64_t bytes, uint64_t physical);
  // Gives back what importers let go of.
  void settle();
  bool empty() const { return kept_.empty(); }
  size_t size() const { return kept_.size(); }

 private:
  struct Kept {
    IpcRegistry::RecordFile file;
    uint64_t bytes;
    uint64_t physical = 0;  // keepMapped's
  };
  MemoryLedger& ledger_;
  const HandleTable& table_;
  std::vector<Kept> kept_;
};

}  // namespace gpool::worker
