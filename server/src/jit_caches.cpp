#include "jit_caches.h"

#include <sys/stat.h>
#include <unistd.h>

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

JitCaches::JitCaches(std::filesystem::path root) : root_(std::move(root)) {
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
  return dir;
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
