// The host's IPC registry (ipc_registry.h).
#include "ipc_registry.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "gpool/hex.h"
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

// Handle layout: u32 magic, u32 kind, 16 bytes host id, 32 bytes key, 8 bytes zero.
constexpr size_t kHostAt = 8, kKeyAt = 24, kKeyBytes = 32;

}  // namespace

IpcRegistry::~IpcRegistry() {
  for (const auto& path : filed_) unlink(path.c_str());
}

proto::Status IpcRegistry::publish(Kind kind, const std::vector<uint8_t>& record, std::vector<uint8_t>& handle,
                                   uint64_t charge) {
  handle.assign(kHandleBytes, 0);
  uint32_t words[2] = {kMagic, static_cast<uint32_t>(kind)};
  std::memcpy(handle.data(), words, sizeof words);
  auto host = this->host();
  std::memcpy(handle.data() + kHostAt, host.data(), host.size());
  if (RAND_bytes(handle.data() + kKeyAt, kKeyBytes) != 1) return proto::cu::kNotInitialized;
  std::string dir = directory();
  mkdir(dir.c_str(), 0700);
  std::string path = pathOf(handle);
  if (!budget::fileRecord(path, record, charge)) return proto::cu::kNotSupported;
  filed_.push_back(path);
  return proto::cu::kSuccess;
}

IpcRegistry::RecordFile IpcRegistry::withdraw(const std::vector<uint8_t>& handle) {
  if (handle.size() != kHandleBytes) return {};
  std::string path = pathOf(handle);
  auto it = std::find(filed_.begin(), filed_.end(), path);
  if (it == filed_.end()) return {};
  filed_.erase(it);
  return budget::withdrawRecord(path);
}

std::string IpcRegistry::pathOf(const std::vector<uint8_t>& handle) {
  return directory() + "/" + hexOf(handle.data() + kKeyAt, kKeyBytes);
}

proto::Status IpcRegistry::open(Kind kind, const std::vector<uint8_t>& handle, RecordFile& file) const {
  if (handle.size() != kHandleBytes) return proto::cu::kInvalidValue;
  uint32_t words[2];
  std::memcpy(words, handle.data(), sizeof words);
  if (words[0] != kMagic || words[1] != static_cast<uint32_t>(kind)) return proto::cu::kInvalidValue;
  auto host = this->host();
  if (std::memcmp(handle.data() + kHostAt, host.data(), host.size()) != 0) return proto::cu::kNotSupported;
  file = RecordFile(::open(pathOf(handle).c_str(), O_RDONLY | O_CLOEXEC));
  return file ? proto::cu::kSuccess : proto::cu::kInvalidValue;
}

proto::Status IpcRegistry::lookup(Kind kind, const std::vector<uint8_t>& handle, std::vector<uint8_t>& record) const {
  RecordFile file;
  if (proto::Status st = open(kind, handle, file); st != proto::cu::kSuccess) return st;
  return budget::readRecord(file.fd(), record) ? proto::cu::kSuccess : proto::cu::kInvalidValue;
}

proto::Status IpcRegistry::lookupHeld(Kind kind, const std::vector<uint8_t>& handle, std::vector<uint8_t>& record,
                                      RecordFile& hold) const {
  RecordFile file;
  if (proto::Status st = open(kind, handle, file); st != proto::cu::kSuccess) return st;
  if (flock(file.fd(), LOCK_SH | LOCK_NB) != 0 || !budget::stillFiled(file.fd(), pathOf(handle)))
    return proto::cu::kInvalidValue;  // being withdrawn, or withdrawn already
  if (!budget::readRecord(file.fd(), record)) return proto::cu::kInvalidValue;
  hold = std::move(file);
  return proto::cu::kSuccess;
}

}  // namespace gpool::worker
