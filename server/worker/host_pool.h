// Shared page-locked host memory (issue 13): where a co-located client's cuMemHostAlloc memory lives.
// On a move to shared memory the worker makes one sparse, size-sealed memfd (the pool) and passes it with
// the transport's segment; the client maps all of it where it likes and names the address (HostPoolAttach);
// the worker maps it at that same address. Pages the client allocates from it are registered with the
// driver (HostPoolRegister), so copies to and from them are direct DMA and kernels reach them at the
// address the program holds, as CUDA promises for mapped host memory. The pool is only ever the worker's
// own: a worker never maps a segment a client made. It goes when the worker does (unmapped, unregistered
// with its context, the memfd's last reference closed).
#pragma once

#include <cstdint>
#include <functional>
#include <map>

#include "gpool/protocol/status.h"

namespace gpool::worker {

class HostPool {
 public:
  // The pool's size: address space, not memory (pages exist once the client writes them).
  static constexpr uint64_t kDefaultBytes = 64ull << 30;

  HostPool() = default;
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // Makes the segment (once): its descriptor, which the caller passes on and this pool keeps; -1 when the
  // host refuses (the client then has no shared page-locked memory).
  int create(uint64_t bytes = kDefaultBytes);
  uint64_t bytes() const { return bytes_; }

  // Maps the segment at `base` (request_checks has checked the window's shape): kInvalidValue when this
  // process has something there (the client tries another address), kIllegalState before create.
  proto::Status attach(uint64_t base, uint64_t bytes);
  bool attached() const { return base_ != 0; }

  // Registered ranges (request_checks has checked that each lies in the window, apart from the others).
  // `pin` registers with the driver (nothing on sim); an unregistered range is dropped either way.
  using Pin = std::function<proto::Status(uint64_t ptr, uint64_t bytes)>;
  proto::Status add(uint64_t ptr, uint64_t bytes, const Pin& pin);
  proto::Status remove(uint64_t ptr, const std::function<proto::Status(uint64_t ptr)>& unpin);
  // Every registered range again (after a context reset dropped the driver's registrations).
  void repin(const Pin& pin) const;
  size_t ranges() const { return ranges_.size(); }

  // Keeps [base, base+bytes) free of this process's memory (another worker's pool of the same lease, as
  // the client mapped it: none of this device's addresses may fall there): what of it is free now is
  // reserved, inaccessible, until the worker ends, never over what this process has there (pieces of at
  // least kKeptFreeGrain). kInvalidValue where none of it could be, kOutOfMemory past kMaxKeptFree asks.
  static constexpr size_t kMaxKeptFree = 64;
  static constexpr uint64_t kKeptFreeGrain = 64 << 10;
  proto::Status keepFree(uint64_t base, uint64_t bytes);

 private:
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint64_t base_ = 0;
  std::map<uint64_t, uint64_t> ranges_;  // ptr -> bytes
  uint64_t reserveFree(uint64_t base, uint64_t bytes);
  std::map<uint64_t, uint64_t> kept_free_;  // base -> bytes, each piece reserved
  size_t keep_free_asked_ = 0;
};

}  // namespace gpool::worker
