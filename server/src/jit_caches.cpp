#include "jit_caches.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace gpool::server {

namespace {

// A directory of this process's user at `path`, made with mode 0700 when missing; "" or why not.
std::string ownDirectory(const std::filesystem::path& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return std::strerror(errno);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (st.st_uid != ::geteuid()) return "it belongs to uid " + std::to_string(st.st_uid) + ", not this server's";
  if ((st.st_mode & 07777) != 0700 && ::chmod(path.c_str(), 0700) != 0) return std::strerror(errno);
  return "";
}

bool plain(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || (c == '.' && !first);
}

}  // namespace

JitCaches::JitCaches(std::filesystem::path root, uint64_t max_bytes) : root_(std::move(root)), max_bytes_(max_bytes) {
  std::error_code ec;
  if (root_.has_parent_path()) std::filesystem::create_directories(root_.parent_path(), ec);
  if (std::string why = ownDirectory(root_); !why.empty())
    throw std::runtime_error("cannot keep the workers' JIT caches in " + root_.string() + ": " + why +
                             " (give --jit-cache a directory of this server's user, or 'none')");
}

std::optional<std::filesystem::path> JitCaches::of(const std::string& user, std::string& why) const {
  std::filesystem::path dir = root_ / directoryName(user);
  if (std::string failed = ownDirectory(dir); !failed.empty()) {
    why = "cannot use " + dir.string() + " as the JIT cache of user '" + user + "': " + failed;
    return std::nullopt;
  }
  ::utimensat(AT_FDCWD, dir.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);  // (used now: what bound() keeps longest)
  return dir;
}

JitCaches::Removed JitCaches::bound(const std::set<std::string>& in_use) const {
  struct Cache {
    std::filesystem::file_time_type used;
    std::string name;
    uint64_t bytes = 0;
  };
  std::vector<Cache> caches;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root_, ec)) {
    if (!entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    Cache c{entry.last_write_time(ec), entry.path().filename().string()};
    for (auto it = std::filesystem::recursive_directory_iterator(entry.path(), ec); !ec && it != std::filesystem::end(it); it.increment(ec))
      if (it->is_regular_file(ec) && !it->is_symlink(ec)) c.bytes += it->file_size(ec);
    total += c.bytes;
    caches.push_back(std::move(c));
  }
  std::sort(caches.begin(), caches.end(), [](const Cache& a, const Cache& b) { return a.used < b.used; });
  Removed removed;
  for (const Cache& c : caches) {
    if (total <= max_bytes_) break;
    if (in_use.count(c.name)) continue;
    std::filesystem::remove_all(root_ / c.name, ec);
    if (ec) continue;
    total -= c.bytes;
    removed.bytes += c.bytes;
    removed.users.push_back(c.name);
  }
  return removed;
}

std::string JitCaches::directoryName(const std::string& user) {
  std::string name;
  for (char c : user) {
    if (plain(c, name.empty())) {
      name += c;
    } else {
      char escaped[4];
      std::snprintf(escaped, sizeof escaped, "%%%02X", static_cast<unsigned char>(c));
      name += escaped;
    }
  }
  return name.empty() ? "%" : name;
}

}  // namespace gpool::server
