// Memory held by importers stays charged (import_holds.h).
#include "import_holds.h"

namespace gpool::worker {

void FreedWhileImported::keep(IpcRegistry::RecordFile file, uint64_t bytes) {
  ledger_.keepFreed(bytes);
  kept_.push_back(Kept{std::move(file), bytes});
}

void FreedWhileImported::keepMapped(IpcRegistry::RecordFile file, uint64_t bytes, uint64_t physical) {
  ledger_.keepCounted(bytes);
  kept_.push_back(Kept{std::move(file), bytes, physical});
}

void FreedWhileImported::settle() {
  std::erase_if(kept_, [this](const Kept& k) {
    if (k.physical) {  // (a handle the driver gave out again since is another allocation's: not released)
      const PhysicalMemory* p = table_.physical(k.physical);
      if (p && p->released) return false;
    }
    if (!k.file.unheld()) return false;
    ledger_.letGo(k.bytes);
    return true;
  });
}

}  // namespace gpool::worker
