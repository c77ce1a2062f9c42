#include "leftover_processes.h"

#include <sys/prctl.h>

#include "gpool/printable.h"
#include "gpool/process_table.h"

namespace gpool::server {

bool adoptOrphans() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

std::vector<pid_t> leftovers(const std::function<bool(pid_t)>& worker) {
  std::vector<pid_t> left;
  for (const Child& c : children())
    if (!worker(c.pid)) left.push_back(c.pid);
  return left;
}

pid_t parentOf(pid_t pid) {
  auto st = procStat(pid);
  return st ? st->ppid : 0;
}

std::string commandOf(pid_t pid) {
  auto st = procStat(pid);
  return st ? printable(st->name) : "?";
}

}  // namespace gpool::server
