// IPC between client processes whose workers share a GPU host (cuIpcGetMemHandle and friends). A handle
// a client receives names its host and a random key; the worker that made it files the backend's own
// export (a driver IPC handle, or the sim's memory descriptor) under that key in a directory of the host
// that the same user's workers share. A worker on another host sees a foreign host in the handle and
// says so; a key nobody filed is refused.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpool/protocol/status.h"

namespace gpool::worker {

class IpcRegistry {
 public:
  static constexpr size_t kHandleBytes = 64;  // CU_IPC_HANDLE_SIZE
  // kShareable: a descriptor's record (shareable_handles.h); kPoolPointer: an allocation of a shared pool.
  enum class Kind : uint32_t { kMemory = 1, kEvent = 2, kShareable = 3, kPoolPointer = 4 };

  ~IpcRegistry();  // withdraws what this worker filed
  // Files `record` and returns the 64-byte handle that names it.
  proto::Status publish(Kind kind, const std::vector<uint8_t>& record, std::vector<uint8_t>& handle);
  // The record a handle names: kNotSupported for a handle made on another host, kInvalidValue for one
  // that is malformed, of another kind, or names nothing.
  proto::Status lookup(Kind kind, const std::vector<uint8_t>& handle, std::vector<uint8_t>& record) const;

  // Removes what `handle` (one this worker published) names: later lookups of it fail.
  void withdraw(const std::vector<uint8_t>& handle);

  static std::string directory();  // /dev/shm/gpool-ipc-<uid>
  // Makes this worker's handles name a host of their own, shared with every worker salted alike (sim:
  // two gpool-servers on one machine stand for two GPU hosts).
  void saltHost(uint64_t salt) { salt_ = salt; }

 private:
  std::array<uint8_t, 16> host() const;
  std::vector<std::string> filed_;
  uint64_t salt_ = 0;
};

}  // namespace gpool::worker
