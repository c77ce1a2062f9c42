#include "leftover_processes.h"

#include <dirent.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "gpool/printable.h"

namespace gpool::server {

bool adoptOrphans() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

namespace {

// Every pid /proc/PID/task/*/children names, or false when the kernel keeps no such file
// (CONFIG_PROC_CHILDREN).
bool childrenFiles(pid_t self, std::vector<pid_t>& out) {
  std::string tasks = "/proc/" + std::to_string(self) + "/task";
  DIR* dir = ::opendir(tasks.c_str());
  if (!dir) return false;
  bool found = false;
  while (dirent* e = ::readdir(dir)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::ifstream f(tasks + "/" + e->d_name + "/children");
    if (!f) continue;
    found = true;
    for (pid_t pid; f >> pid;) out.push_back(pid);
  }
  ::closedir(dir);
  return found;
}

// Every process /proc lists whose parent is `self`.
void scanProc(pid_t self, std::vector<pid_t>& out) {
  DIR* dir = ::opendir("/proc");
  if (!dir) return;
  while (dirent* e = ::readdir(dir))
    if (std::isdigit(static_cast<unsigned char>(e->d_name[0])) && parentOf(static_cast<pid_t>(std::stol(e->d_name))) == self)
      out.push_back(static_cast<pid_t>(std::stol(e->d_name)));
  ::closedir(dir);
}

}  // namespace

std::vector<pid_t> leftovers(const std::function<bool(pid_t)>& worker) {
  pid_t self = ::getpid();
  std::vector<pid_t> children;
  if (!childrenFiles(self, children)) scanProc(self, children);
  std::sort(children.begin(), children.end());
  children.erase(std::unique(children.begin(), children.end()), children.end());
  std::erase_if(children, worker);
  return children;
}

pid_t parentOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return 0;
  size_t end = stat.rfind(')');  // (the command's name, before it, may hold anything)
  if (end == std::string::npos) return 0;
  std::istringstream rest(stat.substr(end + 1));
  std::string state;
  pid_t parent = 0;
  rest >> state >> parent;
  return parent;
}

std::string commandOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!std::getline(f, name)) return "?";
  return printable(name);
}

}  // namespace gpool::server
