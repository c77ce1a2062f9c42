#include "lease_processes.h"

#include <fstream>
#include <string>

#include "leftover_processes.h"  // (parentOf)

namespace gpool::server {
namespace {

std::optional<uid_t> uidOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("Uid:", 0) == 0) return static_cast<uid_t>(std::stoul(line.substr(4)));
  return std::nullopt;
}

}  // namespace

void ProcessOwners::add(size_t lease, const std::vector<pid_t>& workers, std::optional<uid_t> uid) {
  for (pid_t w : workers) by_worker_[w] = lease;
  if (uid) by_uid_[*uid] = lease;
}

std::optional<size_t> ProcessOwners::of(pid_t process) const {
  pid_t p = process;
  for (int depth = 0; p > 1 && depth < 64; ++depth, p = parentOf(p))
    if (auto it = by_worker_.find(p); it != by_worker_.end()) return it->second;
  if (by_uid_.empty()) return std::nullopt;
  auto uid = uidOf(process);
  if (auto it = uid ? by_uid_.find(*uid) : by_uid_.end(); it != by_uid_.end()) return it->second;
  return std::nullopt;
}

}  // namespace gpool::server
