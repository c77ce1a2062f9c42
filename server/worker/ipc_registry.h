// IPC between client processes whose workers share a GPU host (cuIpcGetMemHandle and friends). A handle
// a client receives names its host and a random key; the worker that made it files the backend's own
// export (a driver IPC handle, or the sim's memory descriptor) under that key in a directory of the host
// that the same user's workers share. A worker on another host sees a foreign host in the handle and
// says so; a key nobody filed is refused.
//
// A record's file also tells its exporter whether anyone still holds what it names: an importer of memory
// keeps the file open with a shared lock for as long as it holds the memory (the kernel drops the lock when
// the importer's process ends, however it ends), and an exporter that withdraws a record learns from an
// exclusive lock it cannot take that someone does (import_holds.h). The files' layout is shared with
// gpool-server (export_records.h), which withdraws the records of a worker that ended first.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "export_records.h"
#include "gpool/protocol/status.h"

namespace gpool::worker {

class IpcRegistry {
 public:
  static constexpr size_t kHandleBytes = 64;  // CU_IPC_HANDLE_SIZE
  // kShareable: a descriptor's record (shareable_handles.h); kPoolPointer: an allocation of a shared pool.
  enum class Kind : uint32_t { kMemory = 1, kEvent = 2, kShareable = 3, kPoolPointer = 4 };

  // An open record file: an importer's holds the memory it names; an exporter's, kept after withdrawing the
  // record, tells when its importers let go (export_records.h).
  using RecordFile = budget::RecordFile;

  ~IpcRegistry();  // withdraws what this worker filed
  // Files `record` and returns the 64-byte handle that names it. `charge`: the bytes of memory the record
  // shares, which its lease pays for while anyone holds them, also after this worker ended.
  proto::Status publish(Kind kind, const std::vector<uint8_t>& record, std::vector<uint8_t>& handle, uint64_t charge = 0);
  // The record a handle names: kNotSupported for a handle made on another host, kInvalidValue for one
  // that is malformed, of another kind, or names nothing.
  proto::Status lookup(Kind kind, const std::vector<uint8_t>& handle, std::vector<uint8_t>& record) const;
  // The same for memory about to be imported: `hold` holds it until it is closed. kInvalidValue also for a
  // record its exporter is withdrawing.
  proto::Status lookupHeld(Kind kind, const std::vector<uint8_t>& handle, std::vector<uint8_t>& record, RecordFile& hold) const;

  // Removes what `handle` (one this worker published) names: later lookups of it fail. Returns the record's
  // file, open, when importers still hold it (else an empty one).
  RecordFile withdraw(const std::vector<uint8_t>& handle);

  static std::string directory() { return budget::recordDirectory(); }
  // Makes this worker's handles name a host of their own, shared with every worker salted alike (sim:
  // two gpool-servers on one machine stand for two GPU hosts).
  void saltHost(uint64_t salt) { salt_ = salt; }

 private:
  std::array<uint8_t, 16> host() const;
  static std::string pathOf(const std::vector<uint8_t>& handle);  // (a handle of kHandleBytes)
  // The record file a handle of `kind` names, open.
  proto::Status open(Kind kind, const std::vector<uint8_t>& handle, RecordFile& file) const;
  std::vector<std::string> filed_;
  uint64_t salt_ = 0;
};

}  // namespace gpool::worker
