#include "jit_caches.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "worker_users.h"

namespace gpool::server {

namespace {

// A directory of this process's user at `path`, made with mode `mode` when missing; "" or why not.
std::string ownDirectory(const std::filesystem::path& path, mode_t mode = 0700) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return std::strerror(errno);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (st.st_uid != ::geteuid()) return "it belongs to uid " + std::to_string(st.st_uid) + ", not this server's";
  if ((st.st_mode & 07777) != mode && ::chmod(path.c_str(), mode) != 0) return std::strerror(errno);
  return "";
}

// What cannot change hands stays its previous holder's, out of reach of others as it was.
void chownAt(int fd, const char* name, uid_t uid) {
  if (::fchownat(fd, name, uid, uid, *name ? AT_SYMLINK_NOFOLLOW : AT_EMPTY_PATH) != 0) return;
}

constexpr int kLendDepth = 16;  // deeper than the driver's own layout: what lies below stays as it is

// Makes what the directory open at `fd` holds `uid`'s, depth first: directories, and regular files with one
// link (a file with another link elsewhere may be anyone's; a link is never followed). Nothing else is
// touched. The directory is the server's own (mode 0700) meanwhile, so nobody else reaches into it.
void lendTree(int fd, uid_t uid, int depth) {
  int own = ::dup(fd);  // (closedir closes it)
  DIR* d = own < 0 ? nullptr : ::fdopendir(own);
  if (!d) {
    if (own >= 0) ::close(own);
    return;
  }
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode) && depth < kLendDepth) {
      int sub = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) continue;
      lendTree(sub, uid, depth + 1);
      chownAt(sub, "", uid);
      ::close(sub);
    } else if (S_ISREG(st.st_mode) && st.st_nlink == 1) {
      chownAt(fd, name.c_str(), uid);
    }
  }
  ::closedir(d);
}

bool plain(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || (c == '.' && !first);
}

}  // namespace

JitCaches::JitCaches(std::filesystem::path root, uint64_t max_bytes, bool for_worker_uids)
    : root_(std::move(root)), max_bytes_(max_bytes) {
  if (std::string closed = for_worker_uids ? WorkerUsers::closedAbove(root_) : ""; !closed.empty())
    throw std::runtime_error("the JIT caches in " + root_.string() + " are out of reach of the --worker-uids users (" + closed +
                             " is closed to other users): give --jit-cache a directory they can pass through, such as "
                             "/var/cache/gpool/jit, or 'none'");
  std::error_code ec;
  if (root_.has_parent_path()) std::filesystem::create_directories(root_.parent_path(), ec);
  if (std::string why = ownDirectory(root_, for_worker_uids ? 0711 : 0700); !why.empty())
    throw std::runtime_error("cannot keep the workers' JIT caches in " + root_.string() + ": " + why +
                             " (give --jit-cache a directory of this server's user, or 'none')");
}

std::optional<std::filesystem::path> JitCaches::lend(const std::string& user, uid_t uid, std::string& why) {
  const std::string first = directoryName(user);
  std::optional<std::string> free;  // the first of the user's caches that no uid holds
  for (int n = 1; n <= kCachesPerUser; ++n) {
    std::string name = n == 1 ? first : first + "+" + std::to_string(n);
    auto held = lent_.find(name);
    if (held == lent_.end()) {
      if (!free) free = name;
    } else if (held->second == uid) {  // (lent already: another worker of the same lease)
      auto dir = root_ / name;
      ::utimensat(AT_FDCWD, dir.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
      return dir;
    }
  }
  if (!free) {
    why = "all " + std::to_string(kCachesPerUser) + " JIT caches of user '" + user + "' are lent to other leases of theirs here";
    return std::nullopt;
  }
  return lendDirectory(*free, user, uid, why);
}

std::optional<std::filesystem::path> JitCaches::lendDirectory(const std::string& name, const std::string& user, uid_t uid, std::string& why) {
  auto dir = ownCache(name, user, why);  // the server's, mode 0700: nobody else reaches into it while it changes hands
  if (!dir) return dir;
  int fd = ::open(dir->c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    why = "cannot open " + dir->string() + ": " + std::strerror(errno);
    return std::nullopt;
  }
  lendTree(fd, uid, 0);
  bool lent = ::fchown(fd, uid, uid) == 0;  // the directory itself last
  ::close(fd);
  if (!lent) {
    why = "cannot lend " + dir->string() + " to uid " + std::to_string(uid) + ": " + std::strerror(errno);
    return std::nullopt;
  }
  lent_[name] = uid;
  return dir;
}

void JitCaches::giveBack(uid_t first, uid_t last) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root_, ec)) {
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid < first || st.st_uid > last) continue;
    // Only the directory changes hands: closed again, it keeps its former holder's files out of everyone's
    // reach; the next lend makes them the next holder's.
    if (::lchown(entry.path().c_str(), ::geteuid(), ::getegid()) == 0) ::chmod(entry.path().c_str(), 0700);
  }
  std::erase_if(lent_, [&](const auto& held) { return held.second >= first && held.second <= last; });
}

std::optional<std::filesystem::path> JitCaches::of(const std::string& user, std::string& why) const {
  return ownCache(directoryName(user), user, why);
}

std::optional<std::filesystem::path> JitCaches::ownCache(const std::string& name, const std::string& user, std::string& why) const {
  std::filesystem::path dir = root_ / name;
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
    if (in_use.count(c.name) || lent_.count(c.name)) continue;
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
