// The sim backend's IPC: a large allocation is a memfd mapping, so another worker of this host maps the
// same pages: the exporter shares the memfd by descriptor (shareable_handles.h), and the IPC or pool
// allocation's record names it. Events opened by IPC are events of their own that read as complete (work
// runs in issue order here).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>

#include <cstring>
#include <string>

#include "sim_backend.h"

namespace gpool::worker {
namespace {

struct Export {  // what the registry holds for one exported allocation: its exporter, size, and its pages' handle
  int32_t pid = 0;
  uint64_t size = 0;
  uint8_t pages[IpcRegistry::kHandleBytes] = {};
};
struct PoolId {  // a pool, as its exported descriptor holds it: the exporting worker's process and handle
  int32_t pid = 0;
  uint64_t pool = 0;
};
struct PoolExport {  // an allocation of an exported pool, as the registry holds it
  Export memory;
  PoolId pool;
};

}  // namespace

Status SimBackend::sharePages(uint64_t ptr, uint64_t& size, uint8_t* pages) {
  auto it = shared_.find(ptr);
  if (it == shared_.end()) return CUDA_ERROR_NOT_SUPPORTED;  // a small allocation: not a memfd here
  int fd = ::dup(it->second.fd);  // (publish takes it over)
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  size = it->second.size;
  std::vector<uint8_t> handle;  // (charged nothing: the record that names it charges the lease)
  if (Status st = shareable_.publish(ShareableHandles::Object::kPages, ptr, fd, size, 0, handle); st != CUDA_SUCCESS) return st;
  if (handle.size() != IpcRegistry::kHandleBytes) return CUDA_ERROR_UNKNOWN;
  std::memcpy(pages, handle.data(), handle.size());
  return CUDA_SUCCESS;
}

Status SimBackend::IpcGetMemHandle(AllocBase p, std::vector<uint8_t>& handle) {
  Export e{getpid()};
  if (Status st = sharePages(p.ptr, e.size, e.pages); st != CUDA_SUCCESS) return st;
  std::vector<uint8_t> record(sizeof e);
  std::memcpy(record.data(), &e, sizeof e);
  return publishMemory(p.ptr, record, handle);
}

Status SimBackend::openShared(const std::vector<uint8_t>& pages, uint64_t size, IpcMapping& out) {
  int own = -1;
  uint64_t shared_size = 0;
  if (Status st = shareable_.open(pages, ShareableHandles::Object::kPages, own, shared_size); st != CUDA_SUCCESS)
    return st == CUDA_ERROR_NOT_SUPPORTED ? st : CUDA_ERROR_INVALID_VALUE;  // (another host's; or the exporter freed it or went away)
  struct stat st {};
  if (shared_size < size || fstat(own, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < size) {
    close(own);  // not the memory the record claims
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  close(own);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  out = IpcMapping{reinterpret_cast<uint64_t>(p), size};
  opened_[out.ptr] = Opened{size};
  return CUDA_SUCCESS;
}

Status SimBackend::IpcOpenMemHandle(std::vector<uint8_t> handle, uint32_t, IpcMapping& out) {
  std::vector<uint8_t> record;
  IpcRegistry::RecordFile hold;
  if (Status st = ipc_.lookupHeld(IpcRegistry::Kind::kMemory, handle, record, hold); st != CUDA_SUCCESS) return st;
  Export e;
  if (record.size() != sizeof e) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(&e, record.data(), sizeof e);
  if (e.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;  // as the driver: not in the exporting process
  if (auto it = opened_handles_.find(handle); it != opened_handles_.end()) {
    Opened& o = opened_.at(it->second);
    out = IpcMapping{it->second, o.size};
    ++o.opens;
  } else {
    if (Status st = openShared(std::vector<uint8_t>(e.pages, e.pages + sizeof e.pages), e.size, out); st != CUDA_SUCCESS)
      return st;
    opened_.at(out.ptr).handle = handle;
    opened_handles_[handle] = out.ptr;
  }
  imports_.keep(Shared::kAllocation, out.ptr, std::move(hold));
  return CUDA_SUCCESS;
}

Status SimBackend::IpcCloseMemHandle(IpcMapped p) {
  imports_.letGo(Shared::kAllocation, p.ptr);
  closeOpened(p.ptr);
  return CUDA_SUCCESS;
}

void SimBackend::closeOpened(uint64_t ptr) {
  if (auto it = opened_.find(ptr); it != opened_.end()) {
    if (--it->second.opens > 0) return;  // opened again: still open
    opened_handles_.erase(it->second.handle);
    munmap(reinterpret_cast<void*>(it->first), it->second.size);
    opened_.erase(it);
  }
}

Status SimBackend::IpcGetEventHandle(Event e, std::vector<uint8_t>& handle) {
  if (!(events_[e.v].flags & CU_EVENT_INTERPROCESS)) return CUDA_ERROR_INVALID_VALUE;
  return ipc_.publish(IpcRegistry::Kind::kEvent, std::vector<uint8_t>(8, 0), handle);
}

Status SimBackend::IpcOpenEventHandle(std::vector<uint8_t> handle, Created<Event>& out) {
  std::vector<uint8_t> record;
  if (Status st = ipc_.lookup(IpcRegistry::Kind::kEvent, handle, record); st != CUDA_SUCCESS) return st;
  out = newHandle(HandleKind::kEvent);
  events_[out.v] = EventState{CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS, true, std::chrono::steady_clock::now()};
  return CUDA_SUCCESS;
}

// Memory pools shared between workers: the pool's descriptor is a memfd naming it (process and handle);
// an imported pool opens only allocations of that pool, each a memfd mapping as IPC memory is.
Status SimBackend::MemPoolExportShareable(MemPool p, uint32_t type, std::vector<uint8_t>& handle) {
  return Backend::MemPoolExportShareable(p, type, handle);
}
Status SimBackend::MemPoolImportShareable(std::vector<uint8_t> handle, uint32_t type, Created<MemPool>& out) {
  return Backend::MemPoolImportShareable(std::move(handle), type, out);
}
Status SimBackend::MemPoolExportPointer(AllocBase a, std::vector<uint8_t>& data) { return Backend::MemPoolExportPointer(a, data); }
Status SimBackend::MemPoolImportPointer(MemPool p, std::vector<uint8_t> data, IpcMapping& out) {
  return Backend::MemPoolImportPointer(p, std::move(data), out);
}
Status SimBackend::MemPoolFreeImported(IpcMapped m, Stream s) { return Backend::MemPoolFreeImported(m, s); }

Status SimBackend::exportPool(uint64_t pool, int& fd) {
  auto it = pools_.find(pool);
  if (it == pools_.end() || !(it->second.handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) return CUDA_ERROR_INVALID_VALUE;
  PoolId id{getpid(), pool};
  fd = memfd_create("gpool-sim-pool", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (pwrite(fd, &id, sizeof id, 0) != static_cast<ssize_t>(sizeof id)) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

Status SimBackend::importPool(int fd, uint64_t& pool) {
  PoolId id;
  if (pread(fd, &id, sizeof id, 0) != static_cast<ssize_t>(sizeof id) || id.pid == 0) return CUDA_ERROR_INVALID_VALUE;
  pool = newHandle(HandleKind::kMemPool);
  Pool& p = pools_[pool];
  p.source_pid = id.pid;
  p.source_pool = id.pool;
  return CUDA_SUCCESS;
}

Status SimBackend::exportPoolPointer(uint64_t ptr, std::vector<uint8_t>& record) {
  auto a = pool_allocations_.find(ptr);
  if (a == pool_allocations_.end()) return CUDA_ERROR_INVALID_VALUE;  // not a pool's allocation
  if (!(pools_[a->second.first].handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) return CUDA_ERROR_INVALID_VALUE;
  PoolExport e{Export{getpid()}, PoolId{getpid(), a->second.first}};
  if (Status st = sharePages(ptr, e.memory.size, e.memory.pages); st != CUDA_SUCCESS) return st;
  record.resize(sizeof e);
  std::memcpy(record.data(), &e, sizeof e);
  return CUDA_SUCCESS;
}

Status SimBackend::importPoolPointer(uint64_t pool, const std::vector<uint8_t>& record, IpcMapping& out) {
  PoolExport e;
  if (record.size() != sizeof e) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(&e, record.data(), sizeof e);
  const Pool& p = pools_[pool];
  if (!p.source_pid || p.source_pid != e.pool.pid || p.source_pool != e.pool.pool) return CUDA_ERROR_INVALID_VALUE;  // another pool's
  return openShared(std::vector<uint8_t>(e.memory.pages, e.memory.pages + sizeof e.memory.pages), e.memory.size, out);
}

Status SimBackend::freeImportedPointer(uint64_t ptr, uint64_t) {  // in issue order; its hold went with the call
  closeOpened(ptr);
  return CUDA_SUCCESS;
}

}  // namespace gpool::worker
