// What a worker frees when its client has left while other processes still hold some of its memory
// (import_holds.h). The worker stays until they let go, with its lease charged for what they hold; it
// keeps nothing else meanwhile. It frees the client's other memory (allocations, physical memory, arrays,
// graphs and their allocations), as the client's end would have, and closes what the client imported, so
// that another lease's memory is not kept alive, uncounted, by a worker whose client is gone. Each is
// ended with the client's own call, through the same checks and records, so the lease's count follows.
#include <spdlog/spdlog.h>

#include "dispatcher.h"

namespace gpool::worker {
namespace {

namespace calls = proto::calls;

}  // namespace

void Dispatcher::freeAllBut(const std::set<std::pair<Shared, uint64_t>>& held) {
  const uint64_t before = ledger_.used();
  // Graphs first: an instantiation may hold graph memory and name the memory below. The device's graph
  // reserve is trimmed only where graphs were (trimming needs the context, which a GPU makes at a cost).
  const auto execs = table_.handlesOf(HandleKind::kGraphExec), graphs = table_.handlesOf(HandleKind::kGraph);
  for (uint64_t exec : execs) runForDeparted<calls::GraphExecDestroy>({exec});
  for (uint64_t graph : graphs)  // (a conditional node's bodies go with their graph)
    if (table_.has(HandleKind::kGraph, graph) && table_.ownerOf(HandleKind::kGraph, graph) == 0)
      runForDeparted<calls::GraphDestroy>({graph});
  for (uint64_t ptr : graph_memory_.live()) runForDeparted<calls::MemFree>({ptr});
  if (!execs.empty() || !graphs.empty() || graph_memory_.active()) {
    runForDeparted<calls::DeviceGraphMemTrim>({});
    settleGraphMemory();
  }

  // What the client imported: opened IPC handles, a shared pool's allocations, physical memory.
  for (uint64_t ptr : std::vector<uint64_t>(pool_imports_)) runForDeparted<calls::MemPoolFreeImported>({ptr, uint64_t{0}});
  for (const DeviceRange& r : table_.rangesOf(RangeKind::kIpc))
    for (uint64_t open = 0; open < r.owner; ++open) runForDeparted<calls::IpcCloseMemHandle>({r.base});

  // Physical memory: its mappings and the client's handles go, but for physical memory the client exported
  // that importers hold (an importer's own handle keeps alive only what it imported).
  for (const DeviceRange& m : table_.rangesOf(RangeKind::kMapping))
    if (!held.count({Shared::kPhysical, m.owner})) runForDeparted<calls::MemUnmap>({proto::VaUnmap{m.base, m.bytes}});
  for (uint64_t h : table_.handlesOf(HandleKind::kPhysical))
    if (!held.count({Shared::kPhysical, h})) runForDeparted<calls::MemRelease>({h});

  for (const DeviceRange& a : table_.rangesOf(RangeKind::kAllocation))
    if (!held.count({Shared::kAllocation, a.base})) runForDeparted<calls::MemFree>({a.base});
  for (uint64_t m : table_.handlesOf(HandleKind::kMipmappedArray)) runForDeparted<calls::MipmappedArrayDestroy>({m});
  for (uint64_t a : table_.handlesOf(HandleKind::kArray))  // (a mipmap's levels went with it)
    if (table_.has(HandleKind::kArray, a)) runForDeparted<calls::ArrayDestroy>({a});

  const uint64_t kept = ledger_.used();
  spdlog::info("the client left; freed {} bytes of its device memory no other process holds, kept {} bytes", before - std::min(before, kept), kept);
}

}  // namespace gpool::worker
