// What a worker executes forwarded calls on: the real driver (cuda_backend) or host emulation
// (sim_backend). One pure virtual per line of calls.def, plus the custom device-to-host copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/handshake.h"

namespace gpool::worker {

using proto::Blob;
using proto::Status;

class Backend {
 public:
  virtual ~Backend() = default;

  // Opens the device and fills the handshake reply (driver version, device description).
  virtual Status open(int device, proto::HelloReply& hello) = 0;
  // The lease's memory cap (before open): allocations past it fail with CUDA_ERROR_OUT_OF_MEMORY, and
  // the device's memory is reported as the cap (handshake, MemGetInfo).
  virtual void setMemoryCap(uint64_t bytes) = 0;

#define X(name, number, mode, ins, outs) virtual proto::calls::name::handler name = 0;
#include "gpool/protocol/calls.def"
#undef X

  // Copies `bytes` from device memory to host memory, in stream order; the copy has completed when
  // this returns (the dispatcher sends the data right after).
  virtual Status MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) = 0;
  // Host memory the dispatcher stages device-to-host replies in (page-locked where the backend can, so
  // the device copy runs at full speed); owned by the backend, valid until the next call with a larger size.
  virtual void* stagingBuffer(size_t bytes) {
    if (staging_.size() < bytes) staging_.resize(bytes);
    return staging_.data();
  }
  // Checks a device range before a streamed device-to-host reply starts.
  virtual Status checkDeviceRange(uint64_t ptr, uint64_t bytes) = 0;
  // Where the dispatcher receives the next request's payload of `bytes` bytes; valid until the next
  // call. A backend may hand out page-locked memory so host-to-device copies from it run asynchronously
  // (it must then not hand out a buffer a copy is still reading).
  virtual uint8_t* frameBuffer(size_t bytes) {
    if (frame_.size() < bytes) frame_.resize(bytes);
    return frame_.data();
  }

 private:
  std::vector<uint8_t> staging_;
  std::vector<uint8_t> frame_;
};

}  // namespace gpool::worker
