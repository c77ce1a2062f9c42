// The files in which a GPU host's workers record what they share with other processes (the worker's
// ipc_registry.h files them), as far as gpool-server reads them too: when a worker ends, however it ends
// (killed, crashed, or ended by its bound after its lease: revocation.h), the server withdraws what it had
// filed and keeps its lease charged for what importers still hold (server/src/held_exports.h).
//
// A record's file is a header (the exporting worker, its gpool-server, and the bytes its lease pays for
// while anyone holds what the record names) and the backend's record. An importer holds the file with a
// shared lock for as long as it holds the memory (the kernel drops the lock when the importer's process
// ends). Withdrawing a record renames its file to a withdrawn name, so that no lookup finds it any more,
// and learns from an exclusive lock it cannot take that someone still holds it; the withdrawn file is
// removed once no one does.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gpool::budget {

// An open record file: an importer's holds what it names; a withdrawn one (its exporter's, or gpool-server's
// for an exporter that ended) tells when its importers let go, and is removed when closed.
class RecordFile {
 public:
  RecordFile() = default;
  explicit RecordFile(int fd, std::string withdrawn = {}) : fd_(fd), withdrawn_(std::move(withdrawn)) {}
  RecordFile(RecordFile&& o) noexcept;
  RecordFile& operator=(RecordFile&& o) noexcept;
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;
  ~RecordFile();
  explicit operator bool() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Whether no importer holds the record any more (the question of whoever withdrew it).
  bool unheld() const;

 private:
  void close();
  int fd_ = -1;
  std::string withdrawn_;  // a withdrawn record's path: removed at close
};

// A secret gpool-server gives each worker it starts (in its environment, GPOOL_RECORD_SEAL), which the
// worker's records carry: a record that names a worker without its seal is no record of that worker's (a
// worker of another lease, taken over by its client, could otherwise file one naming it, hold it, and so keep
// that lease charged). Sandboxed workers cannot read one another's environments (worker_sandbox.h).
using RecordSeal = std::array<uint8_t, 16>;
RecordSeal newRecordSeal();  // (random; in the environment as hex digits: gpool/hex.h)
// The seal this process's records carry from now on (a worker's, from its gpool-server; none: zeros).
void sealRecordsWith(const RecordSeal& seal);

// /dev/shm/gpool-ipc-<uid>, shared by the user's workers on this host (with gpool-server --worker-uids, a
// lease's workers: each lease has a user of its own).
std::string recordDirectory(uid_t uid = getuid());

// Files `body` as a new record at `path` (mode 0600), naming this process as its exporter and `charge`
// as the bytes its lease pays for while the record is held. False when it cannot.
bool fileRecord(const std::string& path, const std::vector<uint8_t>& body, uint64_t charge);
// The body of the record open as `fd` (at most 4 KiB); false for a file that is not a record.
bool readRecord(int fd, std::vector<uint8_t>& body);
// Whether the file open as `fd` is still the record filed at `path` (not withdrawn since).
bool stillFiled(int fd, const std::string& path);
// Withdraws the record filed at `path`: no lookup finds it from now on. Returns its file, open, when
// importers still hold it; an empty one when none does (the file is then gone).
RecordFile withdrawRecord(const std::string& path);

// What an ended worker exported that importers still hold, and the bytes its lease pays for it.
struct HeldRecord {
  RecordFile file;
  uint64_t charge = 0;
};
// Withdraws every record that `worker`, an ended child of this process that ran as `uid` with `seal`, filed
// (withdrawn already or not); returns those importers still hold. Only the process that started the worker
// finds its records, only files that `uid` owns count (no other user's worker can file one in its name),
// and only those with its seal (nor can another worker of the same user).
std::vector<HeldRecord> withdrawAllOf(pid_t worker, uid_t uid, const RecordSeal& seal);

}  // namespace gpool::budget
