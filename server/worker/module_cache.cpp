// Files are written under a temporary name and renamed into place, so a reader (another worker) sees
// a whole image or none; a corrupt file is found by its hash and removed. Stores are serialised across
// the host's workers by a lock file, and each recounts the directory under it, so concurrent writers
// together stay within the size cap.
#include "module_cache.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <system_error>

#include "gpool/hex.h"

namespace gpool::worker {

namespace fs = std::filesystem;

ImageHash sha256(const void* data, size_t size) {
  ImageHash h{};
  unsigned int n = 0;
  EVP_Digest(data, size, h.data(), &n, EVP_sha256(), nullptr);
  return h;
}

std::string toHex(const ImageHash& h) { return hexOf(h.data(), h.size()); }

ModuleCache::ModuleCache(fs::path dir, uint64_t max_bytes, std::chrono::seconds touch_after)
    : dir_(std::move(dir)), max_bytes_(max_bytes), touch_after_(touch_after) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) spdlog::warn("module cache {}: {} (images will be sent by every client)", dir_.string(), ec.message());
  evictFor(0);  // a directory over the cap (lowered since) shrinks to it
}

std::optional<std::vector<uint8_t>> ModuleCache::get(const ImageHash& hash) {
  fs::path path = dir_ / toHex(hash);
  std::error_code ec;
  uint64_t size = fs::file_size(path, ec);
  if (ec) return std::nullopt;
  std::vector<uint8_t> bytes(size);
  std::ifstream f(path, std::ios::binary);
  if (!f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size))) return std::nullopt;
  if (sha256(bytes.data(), bytes.size()) != hash) {
    spdlog::warn("module cache: {} does not match its hash; removed", path.string());
    fs::remove(path, ec);
    return std::nullopt;
  }
  auto now = fs::file_time_type::clock::now();
  // (Set to now by utimensat, which writing the file allows: with --worker-uids, images stored by other
  // leases' users are refreshed too.)
  if (auto at = fs::last_write_time(path, ec); !ec && now - at >= touch_after_) ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return bytes;
}

namespace {
// An exclusive lock on the cache directory's lock file, held while it lives (none when it cannot be had).
class DirectoryLock {
 public:
  explicit DirectoryLock(const fs::path& dir) : fd_(::open((dir / ".lock").c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~DirectoryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_;
};
}  // namespace

void ModuleCache::put(const void* data, size_t size) {
  if (size > max_bytes_) return;
  fs::path path = dir_ / toHex(sha256(data, size));
  std::error_code ec;
  if (fs::exists(path, ec)) return;
  DirectoryLock lock(dir_);
  if (!lock.held()) {
    spdlog::warn("module cache: cannot lock {} (the image is not stored)", (dir_ / ".lock").string());
    return;
  }
  if (fs::exists(path, ec)) return;  // another worker stored it meanwhile
  evictFor(size);  // other workers add images too: recount under the lock
  fs::path tmp = dir_ / (".tmp." + std::to_string(getpid()) + "." + path.filename().string());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!f) {
      spdlog::warn("module cache: cannot write {} ({} bytes)", tmp.string(), size);
      fs::remove(tmp, ec);
      return;
    }
  }
  // A directory open to every user (gpool-server --worker-uids: each lease's workers a user of their own)
  // holds images each of them may refresh; images are checked against their names whenever read.
  if (struct stat st {}; ::stat(dir_.c_str(), &st) == 0 && (st.st_mode & S_IWOTH)) ::chmod(tmp.c_str(), 0666);
  fs::rename(tmp, path, ec);
  if (ec) {
    spdlog::warn("module cache: cannot store {}: {}", path.string(), ec.message());
    fs::remove(tmp, ec);
    return;
  }
}

void ModuleCache::evictFor(uint64_t incoming) {
  struct Entry {
    fs::file_time_type at;
    uint64_t size;
    fs::path path;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (!e.is_regular_file(ec) || e.path().filename().string().starts_with(".")) continue;  // .tmp.*, .lock
    uint64_t n = e.file_size(ec);
    entries.push_back({e.last_write_time(ec), n, e.path()});
    total += n;
  }
  if (total + incoming <= max_bytes_) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.at < b.at; });
  for (const Entry& e : entries) {
    if (total + incoming <= max_bytes_) break;
    if (fs::remove(e.path, ec)) total -= e.size;
  }
}

}  // namespace gpool::worker
