// The host's IPC registry (ipc_registry.h).
#include "ipc_registry.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "gpool/protocol/host_identity.h"

namespace gpool::worker {
namespace {

constexpr uint32_t kMagic = 0x50495047;  // "GPIP"

}  // namespace

std::array<uint8_t, 16> IpcRegistry::host() const {
  std::array<uint8_t, 16> id = proto::kernelBootIdBytes();  // differs between hosts and boots
  for (size_t i = 0; i < sizeof salt_; ++i) id[i] ^= static_cast<uint8_t>(salt_ >> (8 * i));
  return id;
}

namespace {

std::string hex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// Handle layout: u32 magic, u32 kind, 16 bytes host id, 32 bytes key, 8 bytes zero.
constexpr size_t kHostAt = 8, kKeyAt = 24, kKeyBytes = 32;

}  // namespace

std::string IpcRegistry::directory() { return "/dev/shm/gpool-ipc-" + std::to_string(getuid()); }

IpcRegistry::~IpcRegistry() {
  for (const auto& path : filed_) unlink(path.c_str());
}

proto::Status IpcRegistry::publish(Kind kind, const std::vector<uint8_t>& record, std::vector<uint8_t>& handle) {
  handle.assign(kHandleBytes, 0);
  uint32_t words[2] = {kMagic, static_cast<uint32_t>(kind)};
  std::memcpy(handle.data(), words, sizeof words);
  auto host = this->host();
  std::memcpy(handle.data() + kHostAt, host.data(), host.size());
  if (RAND_bytes(handle.data() + kKeyAt, kKeyBytes) != 1) return proto::cu::kNotInitialized;
  std::string dir = directory();
  mkdir(dir.c_str(), 0700);
  std::string path = dir + "/" + hex(handle.data() + kKeyAt, kKeyBytes);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return proto::cu::kNotSupported;
  bool ok = write(fd, record.data(), record.size()) == static_cast<ssize_t>(record.size());
  close(fd);
  if (!ok) {
    unlink(path.c_str());
    return proto::cu::kNotSupported;
  }
  filed_.push_back(path);
  return proto::cu::kSuccess;
}

IpcRegistry::RecordFile& IpcRegistry::RecordFile::operator=(RecordFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

IpcRegistry::RecordFile::~RecordFile() {
  if (fd_ >= 0) close(fd_);
}

// Importers hold a shared lock; the exclusive one is free only once none does. (Taken, it is kept until the
// file closes, which does no harm: the record was withdrawn, so no importer comes any more.)
bool IpcRegistry::RecordFile::unheld() const { return fd_ < 0 || flock(fd_, LOCK_EX | LOCK_NB) == 0; }

IpcRegistry::RecordFile IpcRegistry::withdraw(const std::vector<uint8_t>& handle) {
  if (handle.size() != kHandleBytes) return {};
  std::string path = directory() + "/" + hex(handle.data() + kKeyAt, kKeyBytes);
  auto it = std::find(filed_.begin(), filed_.end(), path);
  if (it == filed_.end()) return {};
  filed_.erase(it);
  // Unlinked first: an importer that opened the file but has not yet locked it then finds it withdrawn.
  RecordFile file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  unlink(path.c_str());
  return file.unheld() ? RecordFile{} : std::move(file);
}

namespace {

// The record in the open file `fd` (at most 4 KiB).
proto::Status readRecord(int fd, std::vector<uint8_t>& record) {
  record.resize(4097);
  ssize_t n = pread(fd, record.data(), record.size(), 0);
  if (n < 0 || n > 4096) return proto::cu::kInvalidValue;
  record.resize(static_cast<size_t>(n));
  return proto::cu::kSuccess;
}

}  // namespace

proto::Status IpcRegistry::open(Kind kind, const std::vector<uint8_t>& handle, RecordFile& file) const {
  if (handle.size() != kHandleBytes) return proto::cu::kInvalidValue;
  uint32_t words[2];
  std::memcpy(words, handle.data(), sizeof words);
  if (words[0] != kMagic || words[1] != static_cast<uint32_t>(kind)) return proto::cu::kInvalidValue;
  auto host = this->host();
  if (std::memcmp(handle.data() + kHostAt, host.data(), host.size()) != 0) return proto::cu::kNotSupported;
  std::string path = directory() + "/" + hex(handle.data() + kKeyAt, kKeyBytes);
  file = RecordFile(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return file ? proto::cu::kSuccess : proto::cu::kInvalidValue;
}

proto::Status IpcRegistry::lookup(Kind kind, const std::vector<uint8_t>& handle, std::vector<uint8_t>& record) const {
  RecordFile file;
  if (proto::Status st = open(kind, handle, file); st != proto::cu::kSuccess) return st;
  return readRecord(file.fd_, record);
}

proto::Status IpcRegistry::lookupHeld(Kind kind, const std::vector<uint8_t>& handle, std::vector<uint8_t>& record,
                                      RecordFile& hold) const {
  RecordFile file;
  if (proto::Status st = open(kind, handle, file); st != proto::cu::kSuccess) return st;
  struct stat st {};
  if (flock(file.fd_, LOCK_SH | LOCK_NB) != 0 || fstat(file.fd_, &st) != 0 || st.st_nlink == 0)
    return proto::cu::kInvalidValue;  // being withdrawn, or withdrawn already
  if (proto::Status r = readRecord(file.fd_, record); r != proto::cu::kSuccess) return r;
  hold = std::move(file);
  return proto::cu::kSuccess;
}

}  // namespace gpool::worker
