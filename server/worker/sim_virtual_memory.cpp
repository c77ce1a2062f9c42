// The sim backend's virtual memory management, on the host's own: a reservation is an inaccessible
// anonymous mapping, physical memory a memfd, and cuMemMap maps the memfd into the reservation, so two
// mappings of one allocation share their bytes as they do on a GPU. Access flags are not applied (the
// worker itself copies to and from mapped ranges; a real device enforces them).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>
#include <spdlog/spdlog.h>

#include "sim_backend.h"

namespace gpool::worker {
namespace {

constexpr uint64_t kGranularity = 2u << 20;  // as an H100 reports for device memory

bool aligned(uint64_t v, uint64_t to) { return v % to == 0; }

}  // namespace

Status SimBackend::MemGetGranularity(uint32_t option, uint64_t& bytes) {
  if (option > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) return CUDA_ERROR_INVALID_VALUE;
  bytes = kGranularity;
  return CUDA_SUCCESS;
}

Status SimBackend::MemAddressReserve(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t flags, Created<VaRange>& out) {
  if (size == 0 || !aligned(size, kGranularity) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = kGranularity;
  if (!aligned(alignment, kGranularity) || alignment > (uint64_t{1} << 40) || size > (uint64_t{1} << 46)) return CUDA_ERROR_INVALID_VALUE;
  void* p = reserveRange(size, alignment, hint);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t base = reinterpret_cast<uint64_t>(p);
  out.ptr = base;
  out.size = size;
  reservations_[base] = size;
  return CUDA_SUCCESS;
}

// At the hint where it is aligned and free, as a driver honours one (the client reserves a range another
// worker of its lease holds, to map that worker's memory there); else, with fixed addresses, from the
// fixed address up, where another worker's reservations coincide; else wherever the kernel puts enough to
// align, with the ends given back.
void* SimBackend::reserveRange(uint64_t size, uint64_t alignment, uint64_t hint) {
  constexpr int kReserved = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (hint && aligned(hint, alignment)) {
    void* p = mmap(reinterpret_cast<void*>(hint), size, PROT_NONE, kReserved | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == reinterpret_cast<void*>(hint)) return p;
    if (p != MAP_FAILED) munmap(p, size);
  }
  if (options_.fixed_addresses) return mapFixed(-1, size, alignment, PROT_NONE, kReserved);
  uint64_t span = size + alignment;
  void* p = mmap(nullptr, span, PROT_NONE, kReserved, -1, 0);
  if (p == MAP_FAILED) return p;
  uint64_t start = reinterpret_cast<uint64_t>(p), base = (start + alignment - 1) / alignment * alignment;
  if (base > start) munmap(p, base - start);
  if (start + span > base + size) munmap(reinterpret_cast<void*>(base + size), start + span - base - size);
  return reinterpret_cast<void*>(base);
}

Status SimBackend::MemAddressFree(Released<VaRange> r) {
  munmap(reinterpret_cast<void*>(r.ptr), r.size);
  reservations_.erase(r.ptr);
  return CUDA_SUCCESS;
}

Status SimBackend::MemCreate(AllocBytes bytes, uint32_t, uint32_t, uint32_t, Created<Physical>& out) {
  if (!aligned(bytes, kGranularity)) return CUDA_ERROR_INVALID_VALUE;
  int fd = memfd_create("gpool-sim-physical", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, static_cast<off_t>(bytes.bytes)) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  out = newHandle(HandleKind::kPhysical);
  physical_fds_[out.v] = fd;
  return CUDA_SUCCESS;
}

Status SimBackend::MemRelease(Released<Physical> h) {
  // (Its export, if any, was ended by the worker, which also lets go of it once imported and unmapped: import_holds.h.)
  // Mappings hold their own reference to the memory: it lives on until the last is unmapped.
  if (auto it = physical_fds_.find(h.v); it != physical_fds_.end()) {
    close(it->second);
    physical_fds_.erase(it);
  }
  return CUDA_SUCCESS;
}

Status SimBackend::MemMap(VaMap m) {
  if (!aligned(m.ptr, kGranularity) || !aligned(m.size, kGranularity) || !aligned(m.offset, kGranularity))
    return CUDA_ERROR_INVALID_VALUE;
  int fd = physical_fds_.at(m.physical.v);  // the worker checked it is live
  void* p = mmap(reinterpret_cast<void*>(m.ptr), m.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                 static_cast<off_t>(m.offset));
  return p == MAP_FAILED ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

Status SimBackend::MemUnmap(VaUnmap u) {
  // Back to reserved and inaccessible, so the range can be mapped again.
  void* p = mmap(reinterpret_cast<void*>(u.ptr), u.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

Status SimBackend::MemSetAccess(VaMapped, uint32_t flags) {
  return flags <= CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Shared with other processes (shareable_handles.h): the physical memory's memfd is its descriptor, and an
// imported one is physical memory of this worker's, its size what the memfd holds.
Status SimBackend::MemExportShareable(Physical h, uint32_t type, std::vector<uint8_t>& handle) {
  return Backend::MemExportShareable(h, type, handle);
}
Status SimBackend::MemImportShareable(std::vector<uint8_t> handle, uint32_t type, ImportedPhysical& out) {
  return Backend::MemImportShareable(std::move(handle), type, out);
}

Status SimBackend::exportPhysical(uint64_t h, int& fd) {
  auto it = physical_fds_.find(h);
  if (it == physical_fds_.end()) return CUDA_ERROR_INVALID_VALUE;
  fd = fcntl(it->second, F_DUPFD_CLOEXEC, 0);
  return fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

Status SimBackend::importPhysical(int fd, uint64_t& bytes, uint64_t& h) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || !aligned(static_cast<uint64_t>(st.st_size), kGranularity))
    return CUDA_ERROR_INVALID_VALUE;
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  bytes = static_cast<uint64_t>(st.st_size);
  h = newHandle(HandleKind::kPhysical);
  physical_fds_[h] = own;
  return CUDA_SUCCESS;
}

}  // namespace gpool::worker
