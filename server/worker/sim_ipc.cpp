// The sim backend's IPC: a large allocation is a memfd mapping, so another worker of this host maps the
// same pages through /proc/<pid>/fd/<fd> of the worker that exported it. Events opened by IPC are events
// of their own that read as complete (work runs in issue order here).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda.h>

#include <cstring>
#include <string>

#include "sim_backend.h"

namespace gpool::worker {
namespace {

struct Export {  // what the registry holds for one exported allocation
  int32_t pid = 0, fd = -1;
  uint64_t size = 0;
};

}  // namespace

Status SimBackend::IpcGetMemHandle(AllocBase p, std::vector<uint8_t>& handle) {
  auto it = shared_.find(p.ptr);
  if (it == shared_.end()) return CUDA_ERROR_NOT_SUPPORTED;  // a small allocation: not a memfd here
  Export e{getpid(), it->second.fd, it->second.size};
  std::vector<uint8_t> record(sizeof e);
  std::memcpy(record.data(), &e, sizeof e);
  return ipc_.publish(IpcRegistry::Kind::kMemory, record, handle);
}

Status SimBackend::IpcOpenMemHandle(std::vector<uint8_t> handle, uint32_t, IpcMapping& out) {
  std::vector<uint8_t> record;
  if (Status st = ipc_.lookup(IpcRegistry::Kind::kMemory, handle, record); st != CUDA_SUCCESS) return st;
  Export e;
  if (record.size() != sizeof e) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(&e, record.data(), sizeof e);
  if (e.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;  // as the driver: not in the exporting process
  std::string path = "/proc/" + std::to_string(e.pid) + "/fd/" + std::to_string(e.fd);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;  // the exporter freed it or went away
  void* p = mmap(nullptr, e.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  out = IpcMapping{reinterpret_cast<uint64_t>(p), e.size};
  opened_[out.ptr] = e.size;
  return CUDA_SUCCESS;
}

Status SimBackend::IpcCloseMemHandle(IpcMapped p) {
  if (auto it = opened_.find(p.ptr); it != opened_.end()) {
    munmap(reinterpret_cast<void*>(it->first), it->second);
    opened_.erase(it);
  }
  return CUDA_SUCCESS;
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

}  // namespace gpool::worker
