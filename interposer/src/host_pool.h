// Page-locked host memory that the worker reaches (issue 13; the worker's side is
// server/worker/host_pool.h). A connection over shared memory receives the worker's pool segment; this
// maps it and has the worker map it at the same address, then hands out cuMemHostAlloc memory from it,
// each allocation registered with the worker's driver. Copies to and from such memory are then the
// worker's own (direct DMA, truly asynchronous), and kernels may read and write it, as CUDA promises for
// mapped host memory. Without a pool (TCP, or no address suited both processes) host memory stays
// emulated (api_memory.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace gpool::client {

class Connection;

class HostPool {
 public:
  // Maps segment `fd` (taken: closed on failure, kept otherwise) and agrees an address with the worker
  // behind `conn`; false with `why` set when they found none.
  bool attach(Connection& conn, int fd, std::string& why);
  ~HostPool();

  // `bytes` of page-locked memory, registered with the worker (whole pages); nullptr when the pool is full
  // or the worker refused (the caller then emulates).
  void* allocate(Connection& conn, size_t bytes);
  // Ends an allocation of this pool: the worker unregisters it and its pages go back to the host. False
  // when `p` is not one.
  bool release(Connection& conn, void* p);
  // Whether [p, p+bytes) lies inside one allocation of this pool.
  bool holds(uint64_t p, uint64_t bytes) const;
  // Where the pool is mapped, here and in its worker (set once attached).
  uint64_t base() const { return base_; }
  uint64_t bytes() const { return bytes_; }

  static constexpr int kAttachTries = 6;

 private:
  bool agree(Connection& conn, void* at);
  int fd_ = -1;
  uint64_t base_ = 0, bytes_ = 0, page_ = 4096;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes, coalesced
  std::map<uint64_t, uint64_t> used_;  // address -> bytes (whole pages)
};

}  // namespace gpool::client
