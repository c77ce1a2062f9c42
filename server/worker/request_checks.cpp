// The checks of typed request fields and the records of typed reply fields (request_checks.h).
#include "request_checks.h"

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gpool::worker {

using proto::Status;
namespace cu = proto::cu;

namespace {
constexpr uint64_t kPage = 4096;  // the smallest page a host has: shared host memory comes in whole ones
constexpr uint64_t kUserTop = 1ull << 47;  // where a process's address space ends (x86-64, four-level tables)
}  // namespace

Status RequestChecks::admit(proto::Launchable& f, CallScope& s) {
  if (table_.has(HandleKind::kFunction, f.v)) {
    f.is_kernel = false;
    s.owner = table_.ownerOf(HandleKind::kFunction, f.v);
  } else if (table_.has(HandleKind::kKernel, f.v)) {
    f.is_kernel = true;
    s.owner = table_.ownerOf(HandleKind::kKernel, f.v);
  } else {
    return cu::kInvalidHandle;
  }
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::ModuleRef& m, CallScope& s) {
  if (m.kind > 1 || !table_.has(moduleKind(m.kind), m.handle)) return cu::kInvalidHandle;
  s.owner = m.handle;
  s.new_launchable = m.kind == 0 ? HandleKind::kFunction : HandleKind::kKernel;
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::DevRange& r, CallScope&) { return range(r.ptr, r.bytes); }

Status RequestChecks::admit(proto::DevWrite& w, CallScope&) { return range(w.ptr, w.data.size); }

Status RequestChecks::admit(proto::DevCopy& c, CallScope&) {
  Status st = range(c.dst, c.bytes);
  return st != cu::kSuccess ? st : range(c.src, c.bytes);
}

Status RequestChecks::admit(proto::DevFill& f, CallScope&) {
  if (f.elem != 1 && f.elem != 2 && f.elem != 4) return cu::kInvalidValue;
  if (f.count > UINT64_MAX / f.elem || f.ptr % f.elem != 0) return cu::kInvalidValue;
  return range(f.ptr, f.bytes());
}

Status RequestChecks::admit(proto::DevAddress& a, CallScope& s) {
  s.found = table_.findRange(a.ptr);
  return s.found ? cu::kSuccess : cu::kInvalidValue;
}

Status RequestChecks::admit(proto::DevRect& r, CallScope&) {
  if (r.width == 0 || r.height == 0) r.width = r.height = 0;  // empty: no row is walked, however many it names
  if (r.height > 1 && (r.width > r.pitch || r.pitch > (UINT64_MAX - r.width) / (r.height - 1))) return cu::kInvalidValue;
  return range(r.ptr, r.span());
}

Status RequestChecks::admit(proto::DevWriteRect& w, CallScope& s) {
  if (w.dst.height != 0 && w.dst.width > UINT64_MAX / w.dst.height) return cu::kInvalidValue;
  if (w.data.size != w.dst.width * w.dst.height) return cu::kInvalidValue;
  return admit(w.dst, s);
}

// One of the two ways, of client memory, and no more rows than one channel frame carries.
Status RequestChecks::admit(proto::HostRowsCopy& c, CallScope& s) {
  const proto::DevRect& d = c.device;
  if (c.direction > proto::HostRowsCopy::kFromDevice) return cu::kInvalidValue;
  if (d.height != 0 && d.width > UINT64_MAX / d.height) return cu::kInvalidValue;
  if (c.bytes() > UINT32_MAX - sizeof(uint64_t)) return cu::kInvalidValue;
  return admit(c.device, s);
}

Status RequestChecks::admit(proto::DevCopyRect& c, CallScope& s) {
  if (c.dst.width != c.src.width || c.dst.height != c.src.height) return cu::kInvalidValue;
  Status st = admit(c.dst, s);
  return st != cu::kSuccess ? st : admit(c.src, s);
}

Status RequestChecks::admit(proto::DevFillRect& f, CallScope& s) {
  if (f.elem != 1 && f.elem != 2 && f.elem != 4) return cu::kInvalidValue;
  if (f.dst.ptr % f.elem != 0 || f.dst.pitch % f.elem != 0 || f.dst.width % f.elem != 0) return cu::kInvalidValue;
  return admit(f.dst, s);
}

Status RequestChecks::admit(proto::PitchedAlloc& a, CallScope& s) {
  constexpr uint64_t kAlign = proto::PitchedAlloc::kMaxPitchAlign;
  if (a.width == 0 || a.height == 0 || (a.elem != 4 && a.elem != 8 && a.elem != 16)) return cu::kInvalidValue;
  if (a.width > UINT64_MAX - kAlign) return cu::kOutOfMemory;
  uint64_t row = (a.width + kAlign - 1) / kAlign * kAlign;
  if (a.height > UINT64_MAX / row) return cu::kOutOfMemory;
  proto::AllocBytes bound{row * a.height};
  return admit(bound, s);
}

Status RequestChecks::admit(proto::DevWord& w, CallScope&) {
  if ((w.bytes != 4 && w.bytes != 8) || w.ptr % w.bytes != 0) return cu::kInvalidValue;
  return range(w.ptr, w.bytes);
}

Status RequestChecks::admit(proto::MemOps& ops, CallScope& s) {
  if (ops.v.empty() || ops.v.size() % proto::MemOps::kWordsPerOp || ops.count() > proto::MemOps::kMaxOps) return cu::kInvalidValue;
  for (size_t i = 0; i < ops.count(); ++i) {
    uint32_t op = ops.op(i);
    if (op < proto::MemOps::kWait32 || op > proto::MemOps::kBarrier) return cu::kInvalidValue;
    proto::DevWord w{ops.ptr(i), ops.bytes(i)};
    if (w.bytes == 0 ? (w.ptr != 0 || ops.value(i) != 0) : admit(w, s) != cu::kSuccess) return cu::kInvalidValue;
  }
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::VaMap& m, CallScope& s) {
  const PhysicalMemory* p = table_.has(HandleKind::kPhysical, m.physical) ? table_.physical(m.physical) : nullptr;
  if (!p) return cu::kInvalidHandle;
  if (m.size == 0 || m.ptr > UINT64_MAX - m.size || m.offset > p->bytes || m.size > p->bytes - m.offset) return cu::kInvalidValue;
  if (!table_.inReservation(m.ptr, m.size)) return cu::kInvalidValue;
  bool whole = true;
  if (!table_.mappingsIn(m.ptr, m.size, whole).empty()) return cu::kInvalidValue;  // already mapped
  s.effects.push_back([this, m] { table_.map(m.ptr, m.size, m.physical); });
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::VaUnmap& u, CallScope& s) {
  if (u.size == 0 || u.ptr > UINT64_MAX - u.size || !table_.inReservation(u.ptr, u.size)) return cu::kInvalidValue;
  bool whole = true;
  table_.mappingsIn(u.ptr, u.size, whole);
  if (!whole) return cu::kInvalidValue;  // a mapping is unmapped whole or not at all
  s.effects.push_back([this, u] { ledger_.release(table_.unmap(u.ptr, u.size)); });
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::VaMapped& m, CallScope&) {
  if (m.size == 0 || m.ptr > UINT64_MAX - m.size || !table_.inReservation(m.ptr, m.size)) return cu::kInvalidValue;
  bool whole = true;
  uint64_t covered = m.ptr;  // mappings come in address order and may not overlap: walk them
  for (const DeviceRange* r : table_.mappingsIn(m.ptr, m.size, whole)) {
    if (r->base > covered) return cu::kInvalidValue;  // a hole
    covered = r->base + r->bytes;
  }
  return covered >= m.ptr + m.size ? cu::kSuccess : cu::kInvalidValue;
}

Status RequestChecks::admit(proto::JitOptions& o, CallScope&) {
  if (o.ids.size() != o.values.size() || o.ids.size() > proto::JitOptions::kMaxOptions) return cu::kInvalidValue;
  for (uint32_t id : o.ids)
    if (!proto::JitOptions::numeric(id)) return cu::kInvalidValue;
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::LaunchAttrs& a, CallScope&) {
  if (a.data.size % sizeof(CUlaunchAttribute) != 0 || a.data.size / sizeof(CUlaunchAttribute) > proto::LaunchAttrs::kMax)
    return cu::kInvalidValue;
  for (uint64_t i = 0; i < a.data.size / sizeof(CUlaunchAttribute); ++i) {
    CUlaunchAttribute at;
    const uint8_t* bytes = static_cast<const uint8_t*>(a.data.data) + i * sizeof at;
    std::memcpy(&at, bytes, sizeof at);
    uint32_t id;  // read as a number: a value outside the enum may not be loaded as a CUlaunchAttributeID
    static_assert(sizeof id == sizeof at.id);
    std::memcpy(&id, bytes + offsetof(CUlaunchAttribute, id), sizeof id);
    switch (id) {
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
        if (!table_.has(HandleKind::kEvent, reinterpret_cast<uint64_t>(at.value.programmaticEvent.event))) return cu::kInvalidHandle;
        break;
      case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
        if (!table_.has(HandleKind::kEvent, reinterpret_cast<uint64_t>(at.value.launchCompletionEvent.event))) return cu::kInvalidHandle;
        break;
      case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
        if (Status st = range(reinterpret_cast<uint64_t>(at.value.accessPolicyWindow.base_ptr), at.value.accessPolicyWindow.num_bytes);
            st != cu::kSuccess)
          return st;
        break;
      case CU_LAUNCH_ATTRIBUTE_IGNORE: case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP: case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION: case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
        break;  // plain values the driver checks
      default:
        return cu::kInvalidValue;  // unknown, or graph-only (a device-updatable node hands out a device handle)
    }
  }
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::GraphNodes& n, CallScope& s) {
  for (uint64_t node : n.v)
    if (!table_.has(HandleKind::kGraphNode, node) || table_.ownerOf(HandleKind::kGraphNode, node) != s.graph)
      return cu::kInvalidValue;
  return cu::kSuccess;
}

Status RequestChecks::freeReservation(const proto::VaRange& r, CallScope& s) {
  if (!table_.isReservation(r.ptr, r.size)) return cu::kInvalidValue;
  bool whole = true;
  if (!table_.mappingsIn(r.ptr, r.size, whole).empty()) return cu::kInvalidValue;  // unmap first
  s.effects.push_back([this, r] { table_.removeReservation(r.ptr); });
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::PoolAttribute& a, CallScope&) {
  enum : uint32_t { kFirst = 1, kReleaseThreshold = 4, kReservedHigh = 6, kUsedHigh = 8 };  // CUmemPool_attribute
  if (a.attr < kFirst || a.attr > kUsedHigh || a.attr == kReservedHigh - 1 || a.attr == kUsedHigh - 1)
    return cu::kInvalidValue;  // unknown, or a read-only counter
  if (a.attr == kReleaseThreshold) a.value = std::min(a.value, ledger_.limit());
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::AllocBytes& a, CallScope& s) {
  if (a.bytes == 0) return cu::kInvalidValue;
  if (Status st = ledger_.reserve(a.bytes); st != cu::kSuccess) return st;
  s.reserved += a.bytes;
  return cu::kSuccess;
}

// CUDA arrays (fields.h): a shape gpool takes, charged to the lease; rectangles inside a live array.
Status RequestChecks::admit(proto::ArrayShape& a, CallScope& s) {
  constexpr uint32_t kFlagsTaken = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_TEXTURE_GATHER;
  if ((a.channels != 1 && a.channels != 2 && a.channels != 4) || (a.flags & ~kFlagsTaken) || a.bytes() == 0)
    return cu::kInvalidValue;
  if ((a.flags & CUDA_ARRAY3D_CUBEMAP) && (a.width != a.height || a.depth == 0 || a.depth % 6 != 0)) return cu::kInvalidValue;  // six square faces
  proto::AllocBytes bytes{a.bytes()};
  if (Status st = admit(bytes, s); st != cu::kSuccess) return st;
  s.array = a;
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::ArrayRect& r, CallScope&) {
  const HandleTable::ArrayMemory* m = table_.array(r.array);
  if (!m) return cu::kInvalidHandle;
  const proto::ArrayShape& a = m->shape;
  const uint64_t elem = a.elementBytes();
  if (r.width == 0 || r.height == 0 || r.x % elem != 0 || r.width % elem != 0) return cu::kInvalidValue;
  if (r.x > a.rowBytes() || r.width > a.rowBytes() - r.x || r.y > a.rows() || r.height > a.rows() - r.y || r.z >= a.slices())
    return cu::kInvalidValue;
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::ArrayWrite& w, CallScope& s) {
  if (Status st = admit(w.dst, s); st != cu::kSuccess) return st;  // (inside the array: no product overflows)
  return w.data.size == w.dst.width * w.dst.height ? cu::kSuccess : cu::kInvalidValue;
}

Status RequestChecks::admit(proto::ArrayDevCopy& c, CallScope& s) {
  if (c.device.width != c.array.width || c.device.height != c.array.height) return cu::kInvalidValue;
  if (Status st = admit(c.array, s); st != cu::kSuccess) return st;
  return admit(c.device, s);
}

Status RequestChecks::admit(proto::ArrayCopy& c, CallScope& s) {
  if (c.dst.width != c.src.width || c.dst.height != c.src.height) return cu::kInvalidValue;
  if (Status st = admit(c.dst, s); st != cu::kSuccess) return st;
  return admit(c.src, s);
}

Status RequestChecks::admit(proto::TexResource& r, CallScope& s) {
  if (r.flags != 0) return cu::kInvalidValue;  // (CUDA_RESOURCE_DESC::flags must be zero)
  if (r.type == CU_RESOURCE_TYPE_ARRAY) return table_.array(r.array) ? cu::kSuccess : cu::kInvalidHandle;
  if (r.type == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) return table_.mipmap(r.mipmap) ? cu::kSuccess : cu::kInvalidHandle;
  if (r.type != CU_RESOURCE_TYPE_LINEAR && r.type != CU_RESOURCE_TYPE_PITCH2D) return cu::kInvalidValue;
  const uint64_t elem = uint64_t{proto::ArrayShape::formatBytes(r.format)} * r.channels;
  if (elem == 0 || (r.channels != 1 && r.channels != 2 && r.channels != 4) || r.ptr % elem != 0) return cu::kInvalidValue;
  if (r.type == CU_RESOURCE_TYPE_LINEAR) return r.bytes == 0 ? cu::kInvalidValue : range(r.ptr, r.bytes);
  if (r.width == 0 || r.height == 0 || r.width > r.pitch / elem) return cu::kInvalidValue;
  proto::DevRect rows{r.ptr, r.pitch, r.width * elem, r.height};
  return admit(rows, s);
}

Status RequestChecks::admit(proto::MipmapShape& m, CallScope& s) {
  if (m.bytes() == 0) return cu::kInvalidValue;
  if (Status st = admit(m.base, s); st != cu::kSuccess) return st;  // (its flags and format; reserves level 0)
  proto::AllocBytes rest{m.bytes() - m.base.bytes()};
  if (rest.bytes)
    if (Status st = admit(rest, s); st != cu::kSuccess) return st;
  s.mipmap = m;
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::MipmapLevel& l, CallScope& s) {
  const HandleTable::MipmapMemory* m = table_.mipmap(l.mipmap);
  if (!m) return cu::kInvalidHandle;
  if (l.level >= m->shape.levels) return cu::kInvalidValue;
  s.array = m->shape.level(l.level);
  s.owner = l.mipmap;
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::FreedAlloc& f, CallScope& s) {
  if (graph_memory_.isAllocation(f.ptr)) {  // captured: a free node of the capture's graph
    if (s.capture) s.effects.push_back([this, g = s.capture, p = f.ptr] { graph_memory_.addFree(g, p); });
    else s.effects.push_back([this, p = f.ptr] { graph_memory_.freed(p); });
    return cu::kSuccess;
  }
  if (s.capture) return cu::kInvalidValue;  // a capture frees graph allocations only
  s.freed = table_.allocationAt(f.ptr);  // a global or an interior pointer is not an allocation
  return s.freed ? cu::kSuccess : cu::kInvalidValue;
}

Status RequestChecks::admit(proto::GraphFreed& f, CallScope& s) {
  if (!graph_memory_.isAllocation(f.ptr)) return cu::kInvalidValue;  // a free node frees a graph allocation only
  s.effects.push_back([this, g = s.graph, p = f.ptr] { graph_memory_.addFree(g, p); });
  return cu::kSuccess;
}

// User objects (user_object_refs.h): counts of 1..INT_MAX; a holder gives back at most what it holds.
namespace {
constexpr uint32_t kMaxRefs = INT32_MAX;
}  // namespace

Status RequestChecks::admit(proto::NewRefs& r, CallScope& s) {
  if (r.count == 0 || r.count > kMaxRefs) return cu::kInvalidValue;
  s.refs = r.count;
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::RefsAdded& r, CallScope& s) {
  if (!user_objects_.known(r.obj.v)) return cu::kInvalidHandle;
  if (r.count == 0 || r.count > kMaxRefs || r.move > 1 || (r.move && !s.graph)) return cu::kInvalidValue;
  if (r.move && user_objects_.held(r.obj.v, 0) < r.count) return cu::kInvalidValue;  // moves only what the client has
  s.effects.push_back([this, r, g = s.graph] { user_objects_.add(r.obj.v, g, r.count, r.move != 0); });
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::RefsReleased& r, CallScope& s) {
  if (!user_objects_.known(r.obj.v)) return cu::kInvalidHandle;
  if (r.count == 0 || r.count > kMaxRefs || user_objects_.held(r.obj.v, s.graph) < r.count) return cu::kInvalidValue;
  s.effects.push_back([this, r, g = s.graph] { user_objects_.release(r.obj.v, g, r.count); });
  return cu::kSuccess;
}

// Shared page-locked host memory (host_pool.h). The window: page-aligned, inside the lower half of a
// 64-bit address space (where a process's memory lives), set once.
Status RequestChecks::admit(proto::HostWindow& w, CallScope& s) {
  if (table_.hasHostWindow()) return cu::kIllegalState;
  if (w.base == 0 || w.bytes == 0 || w.base % kPage || w.bytes % kPage || w.base >= kUserTop || w.bytes > kUserTop - w.base)
    return cu::kInvalidValue;
  s.effects.push_back([this, w] { table_.setHostWindow(w.base, w.bytes); });
  return cu::kSuccess;
}

// Addresses to keep free: whole pages of user space, no larger than a pool may be (1 TiB).
Status RequestChecks::admit(proto::KeptFree& k, CallScope&) {
  constexpr uint64_t kMostBytes = 1ull << 40;
  if (k.base == 0 || k.bytes == 0 || k.base % kPage || k.bytes % kPage || k.base >= kUserTop || k.bytes > kMostBytes ||
      k.bytes > kUserTop - k.base)
    return cu::kInvalidValue;
  return cu::kSuccess;
}

// A range to register: whole pages of the window, overlapping no range the client has.
Status RequestChecks::admit(proto::HostRange& r, CallScope& s) {
  if (!table_.hasHostWindow()) return cu::kIllegalState;
  if (r.bytes == 0 || r.ptr % kPage || r.bytes % kPage || !table_.inHostWindow(r.ptr, r.bytes) || table_.overlapsRange(r.ptr, r.bytes))
    return cu::kInvalidValue;
  s.effects.push_back([this, r] { table_.addRange(DeviceRange{r.ptr, r.bytes, RangeKind::kSharedHost, 0}); });
  return cu::kSuccess;
}

Status RequestChecks::admit(proto::HostRangeBase& r, CallScope& s) {
  const DeviceRange* found = table_.findRange(r.ptr);
  if (!found || found->base != r.ptr || found->kind != RangeKind::kSharedHost) return cu::kInvalidValue;
  s.effects.push_back([this, p = r.ptr] { table_.removeRange(p); });
  return cu::kSuccess;
}

void RequestChecks::record(proto::Created<proto::Launchable>& f, CallScope& s) {
  f.is_kernel = s.new_launchable == HandleKind::kKernel;
  table_.add(s.new_launchable, f.v, s.owner);
}

void RequestChecks::record(proto::Created<proto::LaunchableList>& l, CallScope& s) {
  for (uint64_t h : l.v) table_.add(s.new_launchable, h, s.owner);
}

// A loaded module or library (owner: none), or a library's module (owner: the library, which ends it).
void RequestChecks::record(proto::Created<proto::ModuleRef>& m, CallScope& s) { table_.add(moduleKind(m.kind), m.handle, s.owner); }

void RequestChecks::record(proto::NewAlloc& a, CallScope& s) {
  if (s.capture) {  // an allocation node of the capture's graph: charged when the graph runs
    ledger_.release(s.reserved);
    s.reserved = 0;
    graph_memory_.addAllocation(s.capture, a.ptr, a.bytes);
    return;
  }
  // The backend may round up (a pitched allocation's real pitch): the ledger holds what it really took.
  ledger_.settle(s.reserved, a.bytes);
  s.reserved = 0;
  table_.addRange(DeviceRange{a.ptr, a.bytes, RangeKind::kAllocation, 0});
}

void RequestChecks::record(proto::CaptureState& c, CallScope&) {
  if (!c.graph.v || c.types.size() != c.deps.v.size()) return;
  if (!table_.has(HandleKind::kGraph, c.graph.v)) {  // a capture's own graph, named before it ends
    table_.add(HandleKind::kGraph, c.graph.v);
    capture_graphs_.insert(c.graph.v);
  }
  for (uint64_t n : c.deps.v) table_.add(HandleKind::kGraphNode, n, c.graph.v);
}

void RequestChecks::captureEnded(uint64_t graph, bool made) {
  const bool named = capture_graphs_.erase(graph) != 0;
  if (made || (table_.has(HandleKind::kGraph, graph) && !named)) return;  // kept, or captured into
  table_.remove(HandleKind::kGraph, graph);
  graph_memory_.release(graph);
  user_objects_.graphGone(graph);
}

void RequestChecks::record(proto::ModuleGlobal& g, CallScope& s) {
  if (g.bytes == 0 || table_.allocationAt(g.ptr)) return;  // never let a global shadow an allocation
  table_.addRange(DeviceRange{g.ptr, g.bytes, RangeKind::kGlobal, s.owner});
}

}  // namespace gpool::worker
