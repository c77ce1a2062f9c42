// What a worker executes forwarded calls on: the real driver (cuda_backend) or host emulation
// (sim_backend). One `run` overload per line of calls.def, plus the custom device-to-host copy.
// The dispatcher has checked every typed field (request_checks.h) before a backend sees a call.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/handshake.h"
#include "handle_table.h"
#include "host_callbacks.h"
#include "host_pool.h"
#include "import_holds.h"
#include "ipc_registry.h"
#include "launch_timer.h"
#include "peer_links.h"
#include "shareable_handles.h"

namespace gpool::worker {

using proto::Blob;
using proto::Status;
// The typed fields of calls.def (fields.h), as backends name them.
using proto::AllocBase, proto::AllocBytes, proto::Array, proto::ArrayCopy, proto::ArrayDevCopy, proto::ArrayRect, proto::ArrayShape, proto::ArrayWrite, proto::MipmapLevel, proto::MipmapShape, proto::MipmappedArray, proto::TexDescs, proto::TexResource, proto::TexObject, proto::SurfObject, proto::IpcMapped, proto::IpcMapping, proto::ImportedPhysical, proto::GoneAllocations, proto::FreedAddresses, proto::Created, proto::DevAddress, proto::DevCopy, proto::DevCopyRect, proto::DevFill,
    proto::DevFillRect, proto::DevRange, proto::DevWord, proto::MemOps, proto::DevRect, proto::DevWrite, proto::DevWriteRect, proto::HostRowsCopy, proto::PitchedAlloc, proto::Physical, proto::PoolAttribute, proto::ResetAll, proto::VaMap, proto::VaMapped, proto::VaRange, proto::VaUnmap, proto::ChildGraph, proto::Event, proto::FreedAlloc, proto::Graph, proto::GraphAlloc, proto::GraphAllocBytes, proto::GraphFreed, proto::OwnerOf, proto::CaptureState, proto::NewRefs, proto::RefsAdded, proto::RefsReleased, proto::UserObject, proto::GreenCtx, proto::SmSource, proto::SmSplit, proto::TensorMapShape, proto::GraphExec, proto::GraphNode,
    proto::GraphNodes, proto::GraphEdges, proto::LaunchAttrs, proto::Conditional, proto::BodyGraphs, proto::Kernel, proto::KernelCall,
    proto::JitOptions, proto::Launchable, proto::LaunchableList, proto::LinkState, proto::MemPool, proto::MemView, proto::ModuleGlobal, proto::ModuleRef,
    proto::NewAlloc, proto::RangeOf, proto::HostWindow, proto::HostRange, proto::HostRangeBase, proto::KeptFree, proto::Released, proto::Stream;

// Whether call C, with its fields `ins`, needs the device's context (Backend::openContext). All do but
// attaching the shared host pool (which only maps it: its pages are pinned later, with a context), the
// device's status (answered without one, for nvidia-smi through the NVML shim), and a library's load,
// kernels, their owner and unload: CUDA keeps libraries apart from contexts, and NVIDIA's runtime loads its
// images as libraries in every process that asks it anything, before any context exists.
template <typename C>
bool needsContext(const typename C::in::tuple& ins) {
  namespace calls = proto::calls;
  constexpr uint32_t kLibrary = 1;  // ModuleRef::kind
  if constexpr (std::is_same_v<C, calls::HostPoolAttach> || std::is_same_v<C, calls::HostPoolKeepFree> ||
                std::is_same_v<C, calls::DeviceStatus> ||
                std::is_same_v<C, calls::LaunchableOwner>)  // (answered from the worker's table)
    return false;
  else if constexpr (std::is_same_v<C, calls::ModuleLoad>)
    return std::get<1>(ins) != kLibrary;
  else if constexpr (std::is_same_v<C, calls::ModuleUnload> || std::is_same_v<C, calls::ModuleGetFunction> ||
                     std::is_same_v<C, calls::ModuleFunctions>)
    return std::get<0>(ins).kind != kLibrary;
  else
    return true;
}

// A backend also times its launches for the lease's compute share (launch_timer.h).
class Backend : public LaunchTimer {
 public:
  virtual ~Backend() = default;

  // The worker's table of the client's memory (handle_table.h), read-only. Work that runs later than the
  // call that made it (a graph's nodes, on a backend that runs them itself) checks against it, when it
  // runs, that the memory it touches is still the client's.
  void watchMemory(const HandleTable* table) { memory_ = table; }

  // Opens the device and fills the handshake reply (driver version, device description).
  virtual Status open(int device, proto::HelloReply& hello) = 0;
  // The lease's memory cap (before open): the device's memory is reported as the cap in the handshake.
  // The cap itself is enforced by the worker's MemoryLedger.
  virtual void setMemoryCap(uint64_t bytes) = 0;
  // The device's context, made on the first call that needs one (needsContext above), not at open:
  // natively a process that only asks about its device (cuInit, the device count, torch.cuda's checks in
  // every DataLoader worker) has no context, and on a GPU each context takes hundreds of MiB of its memory.
  // Fails as the driver does where the context cannot be made (a full device: out of memory).
  virtual Status openContext() { return proto::cu::kSuccess; }

  // One overload per call in calls.def, selected by the call's tag type. Backends implement them with
  // GPOOL_BACKEND_RUN (below), which calls the backend's member of the call's name.
#define X(name, number, mode, ins, outs)                                               \
  virtual Status run(proto::calls::name, proto::calls::name::in::tuple& in, \
                     proto::calls::name::out::tuple& out) = 0;
#include "gpool/protocol/calls.def"
#undef X

  // The host-function channel is the worker's, whatever the backend (host_callbacks.h).
  Status HostFuncChannel(uint32_t& port, std::vector<uint8_t>& token) { return callbacks_.open(port, token); }
  Status HostFuncChannelLocal(std::string client, std::string& name, std::vector<uint8_t>& token) {
    return callbacks_.openLocal(client, name, token);
  }

  // Answered from the worker's table and graph memory (request_checks.h), whatever the backend.
  Status LaunchableOwner(Launchable, OwnerOf&) { return proto::cu::kSuccess; }
  Status GraphAllocationsGone(FreedAddresses, GoneAllocations&) { return proto::cu::kSuccess; }

  // Server-to-server copies are the worker's too (peer_links.h). Data moves on the legacy stream, through
  // the staging buffer, synchronously, as a relayed copy does.
  void refusePeerLinks() { peers_.refuse(); }
  Status PeerListen(uint32_t& port, std::vector<uint8_t>& key, uint32_t& link) { return peers_.listen(port, key, link); }
  Status PeerConnect(std::string host, uint32_t port, std::vector<uint8_t> key, uint32_t& link) {
    return peers_.connect(host, port, key, link);
  }
  Status PeerAccept(uint32_t link) { return peers_.accept(link); }
  Status PeerSend(uint32_t link, DevRange src) {
    auto read = [&](uint8_t* staging, uint64_t off, uint64_t n) { return MemcpyDtoH(staging, src.ptr + off, n, 0); };
    return peers_.send(link, src.bytes, peerStaging(src.bytes), proto::kBulkChunk, read);
  }
  Status PeerReceive(uint32_t link, DevRange dst) {
    auto write = [&](uint8_t* staging, uint64_t off, uint64_t n) {
      proto::calls::MemcpyHtoD::in::tuple in{DevWrite{dst.ptr + off, Blob{staging, n}}, Stream{0}, 0u};
      proto::calls::MemcpyHtoD::out::tuple out;
      return run(proto::calls::MemcpyHtoD{}, in, out);
    };
    return peers_.receive(link, dst.bytes, peerStaging(dst.bytes), proto::kBulkChunk, write);
  }

  // Shared page-locked host memory (host_pool.h) is the worker's too; backends only pin and unpin it.
  int makeHostPool() { return host_pool_.create(); }
  Status HostPoolAttach(HostWindow w) { return host_pool_.attach(w.base, w.bytes); }
  Status HostPoolRegister(HostRange r) {
    return host_pool_.add(r.ptr, r.bytes, [this](uint64_t p, uint64_t n) { return pinHost(p, n); });
  }
  Status HostPoolUnregister(HostRangeBase r) {
    return host_pool_.remove(r.ptr, [this](uint64_t p) { return unpinHost(p); });
  }
  Status HostPoolKeepFree(KeptFree k) { return host_pool_.keepFree(k.base, k.bytes); }

  // What this worker shares with other processes (shareable_handles.h): physical memory and pools as
  // descriptors, a pool's allocations as records. Backends only turn their objects into descriptors and
  // records, and back.
  static constexpr uint32_t kPosixFileDescriptor = 1;  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
  Status MemExportShareable(Physical h, uint32_t type, std::vector<uint8_t>& handle) {
    const PhysicalMemory* p = memory_ ? memory_->physical(h.v) : nullptr;
    return share(type, ShareableHandles::Object::kPhysical, h.v, p ? p->bytes : 0, p ? p->charge() : 0,
                 [&](int& fd) { return exportPhysical(h.v, fd); }, handle);
  }
  Status MemImportShareable(std::vector<uint8_t> handle, uint32_t type, ImportedPhysical& out) {
    IpcRegistry::RecordFile hold;
    Status st = openShared(handle, type, ShareableHandles::Object::kPhysical, out.bytes,
                           [&](int fd) { return importPhysical(fd, out.bytes, out.handle.v); }, &hold);
    if (st == proto::cu::kSuccess) imports_.keep(Shared::kPhysical, out.handle.v, std::move(hold));
    return st;
  }
  Status MemPoolExportShareable(MemPool p, uint32_t type, std::vector<uint8_t>& handle) {
    return share(type, ShareableHandles::Object::kPool, p.v, 0, 0, [&](int& fd) { return exportPool(p.v, fd); }, handle);
  }
  Status MemPoolImportShareable(std::vector<uint8_t> handle, uint32_t type, Created<MemPool>& out) {
    uint64_t unused = 0;  // (a pool holds no memory itself: its allocations are held as they are opened)
    return openShared(handle, type, ShareableHandles::Object::kPool, unused, [&](int fd) { return importPool(fd, out.v); });
  }
  Status MemPoolExportPointer(AllocBase a, std::vector<uint8_t>& data) {
    std::vector<uint8_t> record;
    if (Status st = exportPoolPointer(a.ptr, record); st != proto::cu::kSuccess) return st;
    return shareable_.file(a.ptr, record, allocationBytes(a.ptr), data);
  }
  Status MemPoolImportPointer(MemPool p, std::vector<uint8_t> data, IpcMapping& out) {
    std::vector<uint8_t> record;
    IpcRegistry::RecordFile hold;
    if (Status st = shareable_.record(data, record, hold); st != proto::cu::kSuccess) return st;
    Status st = importPoolPointer(p.v, record, out);
    if (st == proto::cu::kSuccess) imports_.keep(Shared::kAllocation, out.ptr, std::move(hold));
    return st;
  }
  Status MemPoolFreeImported(IpcMapped m, Stream s) {
    imports_.letGo(Shared::kAllocation, m.ptr);
    return freeImportedPointer(m.ptr, s.v);
  }

  // The client ended: what it imported is not held any more (import_holds.h).
  void letGoOfImports() { imports_.clear(); }
  // Imported physical memory, released and no longer mapped, is not held any more (import_holds.h).
  void physicalImportGone(uint64_t h) { imports_.letGo(Shared::kPhysical, h); }

  // Exports end with what they share (import_holds.h): an allocation freed, physical memory released, or
  // every export at a context reset or the client's end. Those importers still hold come back.
  struct HeldExport {
    Shared kind;
    uint64_t object;
    IpcRegistry::RecordFile file;
  };
  std::vector<HeldExport> endExports(Shared kind, uint64_t object) {
    std::vector<HeldExport> held;
    auto add = [&](IpcRegistry::RecordFile f) {
      if (f) held.push_back(HeldExport{kind, object, std::move(f)});
    };
    if (kind == Shared::kPhysical) {
      add(shareable_.withdraw(ShareableHandles::Object::kPhysical, object));
      return held;
    }
    if (auto it = memory_exports_.find(object); it != memory_exports_.end()) {
      add(ipc_.withdraw(it->second));
      memory_exports_.erase(it);
    }
    add(shareable_.withdraw(ShareableHandles::Object::kPoolAllocation, object));
    return held;
  }
  std::vector<HeldExport> endAllExports() {
    std::vector<HeldExport> held;
    for (auto& [ptr, handle] : memory_exports_)
      if (auto f = ipc_.withdraw(handle)) held.push_back(HeldExport{Shared::kAllocation, ptr, std::move(f)});
    memory_exports_.clear();
    for (auto& h : shareable_.clear())
      if (h.kind != ShareableHandles::Object::kPool)
        held.push_back(HeldExport{h.kind == ShareableHandles::Object::kPhysical ? Shared::kPhysical : Shared::kAllocation,
                                  h.object, std::move(h.file)});
    return held;
  }

  // Graph memory (graph_memory.h): the graph a stream is capturing into (0: none), and what the device
  // holds for graphs' allocations now: in use by live allocations, and reserved (in use or cached).
  virtual uint64_t captureGraph(uint64_t stream) = 0;
  virtual void graphMemory(uint64_t& used, uint64_t& reserved) = 0;

  // Copies `bytes` from device memory to host memory, in stream order; the copy has completed when
  // this returns (the dispatcher sends the data right after). Range and stream are checked.
  virtual Status MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) = 0;
  // Host memory the dispatcher stages device-to-host replies in (page-locked where the backend can, so
  // the device copy runs at full speed); owned by the backend, valid until the next call with a larger size.
  virtual void* stagingBuffer(size_t bytes) {
    if (staging_.size() < bytes) staging_.resize(bytes);
    return staging_.data();
  }
  // Where the dispatcher receives the next request's payload of `bytes` bytes; valid until the next
  // call. A backend may hand out page-locked memory so host-to-device copies from it run asynchronously
  // (it must then not hand out a buffer a copy is still reading).
  virtual uint8_t* frameBuffer(size_t bytes) {
    if (frame_.size() < bytes) frame_.resize(bytes);
    return frame_.data();
  }

 protected:
  // Registers [ptr, ptr+bytes) of the shared pool with the device, mapped at the same address for kernels;
  // and ends that. The sim backend reaches host memory as it is.
  virtual Status pinHost(uint64_t, uint64_t) { return proto::cu::kSuccess; }
  virtual Status unpinHost(uint64_t) { return proto::cu::kSuccess; }
  // A descriptor for physical memory `h` (the caller owns it); physical memory from a descriptor another
  // worker exported (not taken over), whose size the exporter recorded as `bytes` (a backend that can
  // read the true size corrects it).
  virtual Status exportPhysical(uint64_t h, int& fd) = 0;
  virtual Status importPhysical(int fd, uint64_t& bytes, uint64_t& h) = 0;
  // The same for a pool (which must have been created exportable), and for one of its allocations: the
  // record another worker opens it from, the mapping that opens it against the pool imported from its
  // pool, and the end of that mapping, in stream order.
  virtual Status exportPool(uint64_t pool, int& fd) = 0;
  virtual Status importPool(int fd, uint64_t& pool) = 0;
  virtual Status exportPoolPointer(uint64_t ptr, std::vector<uint8_t>& record) = 0;
  virtual Status importPoolPointer(uint64_t pool, const std::vector<uint8_t>& record, IpcMapping& out) = 0;
  virtual Status freeImportedPointer(uint64_t ptr, uint64_t stream) = 0;
  HostPool host_pool_;
  HostCallbacks callbacks_;
  // An allocation's IPC export (cuIpcGetMemHandle): filed once, the same handle again after; it ends when
  // the allocation is freed (endExports).
  Status publishMemory(uint64_t ptr, const std::vector<uint8_t>& record, std::vector<uint8_t>& handle) {
    if (auto it = memory_exports_.find(ptr); it != memory_exports_.end()) {
      handle = it->second;
      return proto::cu::kSuccess;
    }
    Status st = ipc_.publish(IpcRegistry::Kind::kMemory, record, handle, allocationBytes(ptr));
    if (st == proto::cu::kSuccess) memory_exports_[ptr] = handle;
    return st;
  }
  IpcRegistry ipc_;
  ShareableHandles shareable_{ipc_};
  ImportHolds imports_;  // what this worker holds of other workers' memory
  std::map<uint64_t, std::vector<uint8_t>> memory_exports_;  // allocation -> its IPC handle
  PeerLinks peers_;
  const HandleTable* memory_ = nullptr;

 private:
  // A descriptor `exportFd` makes, filed under `handle`; a descriptor fetched by `handle`, given to
  // `importFd` and closed after. POSIX descriptors only.
  // (`charge`: what the lease pays for the object while it is held: export_records.h.)
  template <typename Export>
  Status share(uint32_t type, ShareableHandles::Object kind, uint64_t object, uint64_t bytes, uint64_t charge,
               Export exportFd, std::vector<uint8_t>& handle) {
    if (type != kPosixFileDescriptor) return proto::cu::kNotSupported;
    int fd = -1;
    if (Status st = exportFd(fd); st != proto::cu::kSuccess) return st;
    return shareable_.publish(kind, object, fd, bytes, charge, handle);
  }
  // The bytes of the client's allocation at `base` (0: none the table knows).
  uint64_t allocationBytes(uint64_t base) const {
    const DeviceRange* r = memory_ ? memory_->allocationAt(base) : nullptr;
    return r ? r->bytes : 0;
  }
  template <typename Import>
  Status openShared(const std::vector<uint8_t>& handle, uint32_t type, ShareableHandles::Object kind, uint64_t& bytes,
                    Import importFd, IpcRegistry::RecordFile* hold = nullptr) {
    if (type != kPosixFileDescriptor) return proto::cu::kNotSupported;
    int fd = -1;
    if (Status st = shareable_.open(handle, kind, fd, bytes, hold); st != proto::cu::kSuccess) return st;
    Status st = importFd(fd);
    close(fd);
    return st;
  }
  uint8_t* peerStaging(uint64_t bytes) { return static_cast<uint8_t*>(stagingBuffer(std::min<uint64_t>(bytes, proto::kBulkChunk))); }
  std::vector<uint8_t> staging_;
  std::vector<uint8_t> frame_;
};

// In a backend class, inside an X-macro over calls.def: the `run` override of call `name`, which passes
// the request fields by value and the reply fields by reference to the backend's member `name` (a
// hand-written method, or a generic forwarder on the cuda backend).
#define GPOOL_BACKEND_RUN(name)                                                                        \
  Status run(proto::calls::name, proto::calls::name::in::tuple& in, proto::calls::name::out::tuple& out) \
      override {                                                                                       \
    return std::apply(                                                                                 \
        [&](auto&... i) { return std::apply([&](auto&... o) { return this->name(i..., o...); }, out); }, in); \
  }

}  // namespace gpool::worker
