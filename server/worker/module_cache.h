// The per-host module image cache: images (fat binaries, cubins, PTX) stored by SHA-256 in a directory
// every worker on the host shares, so an image crosses the network once per host, not once per process.
// Keys are always computed here from the bytes; a client's hash only asks for an image.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gpool::worker {

using ImageHash = std::array<uint8_t, 32>;

ImageHash sha256(const void* data, size_t size);
std::string toHex(const ImageHash& h);

class ModuleCache {
 public:
  // `dir` is created when missing. `max_bytes` bounds the directory: the least recently used images
  // are removed when a store would pass it. A read refreshes an image's recency when it is older than
  // `touch_after` (a write on every load would cost more than it tells).
  ModuleCache(std::filesystem::path dir, uint64_t max_bytes, std::chrono::seconds touch_after = std::chrono::hours(1));

  // The image with this hash, read back and verified, or nullopt (absent, unreadable or corrupt).
  std::optional<std::vector<uint8_t>> get(const ImageHash& hash);
  // Stores an image that loaded successfully (no-op when present). Failures are logged, not fatal.
  void put(const void* data, size_t size);

  const std::filesystem::path& dir() const { return dir_; }

 private:
  // Recounts the directory and removes least recently used images until `incoming` more bytes fit.
  void evictFor(uint64_t incoming);

  std::filesystem::path dir_;
  uint64_t max_bytes_;
  std::chrono::seconds touch_after_;
};

}  // namespace gpool::worker
