// Physical memory and memory pools shared between processes as file descriptors
// (cuMemExportToShareableHandle and cuMemPoolExportToShareableHandle with
// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), between two workers of one GPU host. The exporting worker
// keeps its backend's descriptor (the driver's, or one the sim makes) and files, in the host's IPC registry
// (ipc_registry.h), a record naming its own Unix socket; the 64-byte registry handle is what the client
// receives. An importing worker looks the handle up, connects to that socket, presents the handle and
// receives the descriptor over SCM_RIGHTS, which its backend then imports. The socket lives in the
// registry's directory (mode 0700, one per user), answers only the same user (SO_PEERCRED), and hands a
// descriptor only to a peer that presents a handle it filed; every read and write on it has a timeout,
// and a peer that misbehaves loses only its own connection.
//
// An allocation of a shared pool travels as a record instead (CUmemPoolPtrExportData: what the backend
// needs to open it), filed here too, so that this one place knows everything the worker shares.
//
// An export lasts until its exporter releases the memory, destroys the pool or frees the allocation (or
// resets its context, or ends): importers keep what they imported, as with CUDA, but a descriptor or record
// received after that no longer imports.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpool/protocol/status.h"
#include "ipc_registry.h"

namespace gpool::worker {

class ShareableHandles {
 public:
  // What a handle shares. kPages: the pages of an allocation that a backend shares as a descriptor itself (the
  // sim's memfd), which an IPC or pool allocation's record names.
  enum class Object : uint32_t { kPhysical = 1, kPool = 2, kPoolAllocation = 3, kPages = 4 };

  explicit ShareableHandles(IpcRegistry& registry) : registry_(registry) {}
  ~ShareableHandles();
  ShareableHandles(const ShareableHandles&) = delete;
  ShareableHandles& operator=(const ShareableHandles&) = delete;

  // Files `fd` (taken over: closed here in every case) for `object` (physical memory of `bytes` bytes, or a
  // pool) and returns the handle that names it; the same handle again for an object already exported.
  // `charge`: what the lease pays for it while anyone holds it (ipc_registry.h).
  proto::Status publish(Object kind, uint64_t object, int fd, uint64_t bytes, uint64_t charge, std::vector<uint8_t>& handle);
  // The descriptor a handle of an object of `kind` names (the caller closes it) and the size its exporter
  // recorded: kNotSupported for a handle of another host, kInvalidValue for one of another kind or that
  // nobody (or no longer anybody) exports.
  // `hold`, when given, holds the export until it is closed (ipc_registry.h).
  proto::Status open(const std::vector<uint8_t>& handle, Object kind, int& fd, uint64_t& bytes,
                     IpcRegistry::RecordFile* hold = nullptr) const;
  // Files `record` for the pool allocation at `ptr` and returns the handle that names it (the same again
  // for an allocation already exported); and the record a handle names.
  proto::Status file(uint64_t ptr, const std::vector<uint8_t>& record, uint64_t charge, std::vector<uint8_t>& handle);
  // (`hold`: as for open.)
  proto::Status record(const std::vector<uint8_t>& handle, std::vector<uint8_t>& record, IpcRegistry::RecordFile& hold) const {
    return registry_.lookupHeld(IpcRegistry::Kind::kPoolPointer, handle, record, hold);
  }
  // Ends the export of an object: its record's file when importers still hold it (ipc_registry.h).
  IpcRegistry::RecordFile withdraw(Object kind, uint64_t object);
  // Ends every export; those importers still hold come back, with what they share.
  struct Held {
    Object kind;
    uint64_t object;
    IpcRegistry::RecordFile file;
  };
  std::vector<Held> clear();

  // The socket's wait for a request, and a fetch's for the answer.
  static constexpr int kTimeoutMs = 2000;
  static constexpr size_t kMaxPending = 64;  // requests read at once; a connection beyond them is closed

 private:
  struct Export {
    std::vector<uint8_t> handle;
    int fd = -1;  // none for a pool allocation's record
  };
  bool listen();
  void serve();
  void answer(int conn, const std::vector<uint8_t>& handle);

  IpcRegistry& registry_;
  mutable std::mutex mu_;
  std::map<std::pair<Object, uint64_t>, Export> exports_;
  std::string path_;                    // the socket, once listening
  int listen_fd_ = -1, stop_fd_ = -1;
  std::thread server_;
};

}  // namespace gpool::worker
