// The users leases' workers run as (worker_users.h).
#include "worker_users.h"

#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "export_records.h"

namespace gpool::server {

namespace {

bool parseUid(std::string_view text, uid_t& uid) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), uid);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

}  // namespace

std::optional<WorkerUsers::Range> WorkerUsers::parse(const std::string& text, std::string& why) {
  Range r;
  auto dash = text.find('-');
  std::string_view first = std::string_view(text).substr(0, dash);
  std::string_view last = dash == std::string::npos ? first : std::string_view(text).substr(dash + 1);
  if (!parseUid(first, r.first) || !parseUid(last, r.last) || r.last < r.first) {
    why = "--worker-uids takes FIRST-LAST (e.g. 2000000-2000255) or one uid, not '" + text + "'";
    return std::nullopt;
  }
  if (r.first == 0 || r.last >= 0x7fffffff) {
    why = "--worker-uids: uids from 1 to 2147483646 (not root's)";
    return std::nullopt;
  }
  if (r.last - r.first >= kMaxRange) {
    why = "--worker-uids: at most " + std::to_string(kMaxRange) + " uids (a server serves at most 256 leases at once)";
    return std::nullopt;
  }
  return r;
}

WorkerUsers::WorkerUsers(Range range) : range_(range) {
  if (::geteuid() != 0)
    throw std::runtime_error("--worker-uids needs gpool-server to run as root: it starts each worker as root, and the "
                             "worker becomes its lease's user at once");
  for (uid_t u = range_.first;; ++u) {
    if (const passwd* pw = ::getpwuid(u))
      throw std::runtime_error("--worker-uids: uid " + std::to_string(u) + " is user '" + pw->pw_name +
                               "'; give a range no account or group uses (gpool kills every process of a uid when its "
                               "lease ends)");
    if (const group* gr = ::getgrgid(u))
      throw std::runtime_error("--worker-uids: gid " + std::to_string(u) + " is group '" + gr->gr_name +
                               "' (a lease's workers run with the group of their uid's number); give a range no account "
                               "or group uses");
    if (u == range_.last) break;
  }
  for (uid_t u = range_.first;; ++u) {  // what a gpool-server before this one left running as them
    clear(u);
    if (u == range_.last) break;
  }
}

WorkerUsers::~WorkerUsers() {
  for (const auto& [lease, uid] : by_lease_) clear(uid);
}

std::optional<uid_t> WorkerUsers::take(const std::string& lease) {
  if (auto it = by_lease_.find(lease); it != by_lease_.end()) return it->second;
  std::set<uid_t> taken;
  for (const auto& [l, uid] : by_lease_) taken.insert(uid);
  for (uid_t u = range_.first;; ++u) {
    if (!taken.count(u)) {
      clear(u);  // (a server before this one may have left processes or records of the uid)
      by_lease_[lease] = u;
      return u;
    }
    if (u == range_.last) return std::nullopt;
  }
}

std::optional<uid_t> WorkerUsers::release(const std::string& lease) {
  auto it = by_lease_.find(lease);
  if (it == by_lease_.end()) return std::nullopt;
  uid_t uid = it->second;
  clear(uid);
  by_lease_.erase(it);
  return uid;
}

void WorkerUsers::clear(uid_t uid) {
  // kill(-1) signals every process the caller may signal but itself: as `uid`, that is each process of it.
  pid_t killer = ::fork();
  if (killer == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) _exit(1);
    ::kill(-1, SIGKILL);
    _exit(0);
  }
  if (killer < 0) spdlog::warn("cannot clear uid {} of --worker-uids (fork: {}): what runs as it is not killed", uid, std::strerror(errno));
  if (killer > 0) {  // reaped here, so gpool-server's watch of its workers never sees it
    int status = 0;
    while (::waitpid(killer, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      spdlog::warn("cannot clear uid {} of --worker-uids (the process that kills its processes failed): what runs as it is "
                   "not killed", uid);
  }
  std::error_code ec;
  std::filesystem::remove_all(budget::recordDirectory(uid), ec);  // (a link there is removed, not followed)
}

std::string WorkerUsers::closedAbove(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  for (fs::path above = fs::absolute(path).parent_path(); !above.empty(); above = above.parent_path()) {
    struct stat st {};
    if (::stat(above.c_str(), &st) == 0 && !(st.st_mode & S_IXOTH)) return above.string();
    if (above == above.root_path()) break;
  }
  return "";
}

void WorkerUsers::shareDirectory(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path path = fs::absolute(dir);
  if (std::string closed = closedAbove(path); !closed.empty())  // (before making any)
    throw std::runtime_error("the module cache " + path.string() + " is out of reach of the --worker-uids users (" + closed +
                             " is closed to other users): give --module-cache a directory they can reach, such as "
                             "/var/cache/gpool/modules, or none");
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw std::runtime_error("cannot make the module cache " + path.string() + ": " + ec.message());
  if (::chmod(path.c_str(), 0777) != 0)
    throw std::runtime_error("cannot open the module cache " + path.string() + " to the workers' users: " + std::strerror(errno));
}

}  // namespace gpool::server
