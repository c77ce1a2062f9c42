#include "gpool/process_table.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpool {

namespace fs = std::filesystem;

// /proc/PID/stat: "PID (COMM) STATE PPID ...", where COMM may hold spaces and parentheses.
std::optional<ProcStat> procStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  ProcStat st;
  st.name = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 1));
  if (!(rest >> st.state >> st.ppid)) return std::nullopt;
  return st;
}

namespace {

bool isPid(const std::string& name) {
  return !name.empty() && name.size() <= 9 && name.find_first_not_of("0123456789") == std::string::npos;
}

// The pids /proc/self/task/*/children names (each thread's children), or false when the kernel keeps no
// such file.
bool childrenFiles(std::vector<pid_t>& out) {
  std::error_code ec;
  bool found = false;
  for (fs::directory_iterator it("/proc/self/task", ec), end; !ec && it != end; it.increment(ec)) {
    std::ifstream f(it->path() / "children");
    if (!f) continue;
    found = true;
    for (pid_t pid; f >> pid;) out.push_back(pid);
  }
  return found;
}

}  // namespace

std::vector<Child> children() {
  std::vector<Child> out;
  const pid_t self = ::getpid();
  if (std::vector<pid_t> pids; childrenFiles(pids)) {
    std::sort(pids.begin(), pids.end());
    pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
    for (pid_t pid : pids)
      if (auto st = procStat(pid); st && st->ppid == self) out.push_back({pid, st->name});
    return out;
  }
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {  // (processes come and go meanwhile)
    const std::string name = it->path().filename().string();
    if (!isPid(name)) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    if (auto st = procStat(pid); st && st->ppid == self) out.push_back({pid, st->name});
  }
  return out;
}

}  // namespace gpool
