// The host's IPC registry (ipc_registry.h).
#include "ipc_registry.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>

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
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
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

void IpcRegistry::withdraw(const std::vector<uint8_t>& handle) {
  if (handle.size() != kHandleBytes) return;
  std::string path = directory() + "/" + hex(handle.data() + kKeyAt, kKeyBytes);
  for (auto it = filed_.begin(); it != filed_.end(); ++it) {
    if (*it != path) continue;
    unlink(path.c_str());
    filed_.erase(it);
    return;
  }
}

proto::Status IpcRegistry::lookup(Kind kind, const std::vector<uint8_t>& handle, std::vector<uint8_t>& record) const {
  if (handle.size() != kHandleBytes) return proto::cu::kInvalidValue;
  uint32_t words[2];
  std::memcpy(words, handle.data(), sizeof words);
  if (words[0] != kMagic || words[1] != static_cast<uint32_t>(kind)) return proto::cu::kInvalidValue;
  auto host = this->host();
  if (std::memcmp(handle.data() + kHostAt, host.data(), host.size()) != 0) return proto::cu::kNotSupported;
  std::ifstream in(directory() + "/" + hex(handle.data() + kKeyAt, kKeyBytes), std::ios::binary);
  if (!in) return proto::cu::kInvalidValue;
  record.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return record.size() <= 4096 ? proto::cu::kSuccess : proto::cu::kInvalidValue;
}

}  // namespace gpool::worker
