// Shared page-locked host memory (host_pool.h).
#include "host_pool.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpool::worker {

namespace cu = proto::cu;

HostPool::~HostPool() {
  if (base_) ::munmap(reinterpret_cast<void*>(base_), bytes_);
  for (auto [base, bytes] : kept_free_) ::munmap(reinterpret_cast<void*>(base), bytes);
  if (fd_ >= 0) ::close(fd_);
}

int HostPool::create(uint64_t bytes) {
  if (fd_ >= 0) return fd_;
  int fd = ::memfd_create("gpool-host-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  // Sealed against resizing: the client cannot shrink it under the worker's mapping (a fault here).
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    spdlog::warn("no shared page-locked memory for this client: cannot make the pool segment: {}", std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return -1;
  }
  fd_ = fd;
  bytes_ = bytes;
  return fd_;
}

proto::Status HostPool::attach(uint64_t base, uint64_t bytes) {
  if (fd_ < 0 || base_ != 0) return cu::kIllegalState;
  if (bytes != bytes_) return cu::kInvalidValue;
  void* want = reinterpret_cast<void*>(base);
  void* got = ::mmap(want, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd_, 0);
  if (got == MAP_FAILED) {
    spdlog::debug("host pool: {:#x} is taken here ({}); the client tries elsewhere", base, std::strerror(errno));
    return cu::kInvalidValue;
  }
  if (got != want) {  // a kernel before 4.17 treats the flag as a hint
    ::munmap(got, bytes_);
    return cu::kInvalidValue;
  }
  base_ = base;
  return cu::kSuccess;
}

proto::Status HostPool::keepFree(uint64_t base, uint64_t bytes) {
  if (keep_free_asked_ >= kMaxKeptFree) return cu::kOutOfMemory;
  ++keep_free_asked_;
  uint64_t kept = reserveFree(base, bytes);
  if (kept < bytes)
    spdlog::debug("host pool: kept {} of {} bytes at {:#x} free for another worker's pool (this worker has memory in the rest)",
                  kept, bytes, base);
  return kept ? cu::kSuccess : cu::kInvalidValue;
}

// What of [base, base+bytes) this process has not mapped, reserved: all of it where it can, else each half
// in turn, around what is mapped there, down to kKeptFreeGrain. Returns the bytes reserved.
uint64_t HostPool::reserveFree(uint64_t base, uint64_t bytes) {
  if (bytes < kKeptFreeGrain) return 0;
  void* want = reinterpret_cast<void*>(base);
  void* got = ::mmap(want, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (got == want) {
    kept_free_[base] = bytes;
    return bytes;
  }
  if (got != MAP_FAILED) ::munmap(got, bytes);  // (a kernel before 4.17 treats the flag as a hint: none of this works)
  if (got != MAP_FAILED || errno != EEXIST) return 0;
  uint64_t half = bytes / 2 / kKeptFreeGrain * kKeptFreeGrain;
  if (half == 0) return 0;
  return reserveFree(base, half) + reserveFree(base + half, bytes - half);
}

proto::Status HostPool::add(uint64_t ptr, uint64_t bytes, const Pin& pin) {
  if (!base_) return cu::kIllegalState;
  if (proto::Status st = pin(ptr, bytes)) return st;
  ranges_[ptr] = bytes;
  return cu::kSuccess;
}

proto::Status HostPool::remove(uint64_t ptr, const std::function<proto::Status(uint64_t)>& unpin) {
  auto it = ranges_.find(ptr);
  if (it == ranges_.end()) return cu::kInvalidValue;
  ranges_.erase(it);
  return unpin(ptr);
}

void HostPool::repin(const Pin& pin) const {
  for (auto [ptr, bytes] : ranges_)
    if (proto::Status st = pin(ptr, bytes))
      spdlog::warn("host pool: {:#x} ({} bytes) could not be registered again after a context reset ({})", ptr, bytes, st);
}

}  // namespace gpool::worker
