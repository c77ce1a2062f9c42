// What /proc says of processes, for the programs that end what others leave running: gpool run (its
// command's leftovers, tools/gpool/descendants.h) and gpool-server (its workers', server/src/leftover_processes.h).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace gpool {

// What /proc/PID/stat says of process `pid`: its state letter (R, S, T for stopped...), its parent and its
// command name (comm, the process's own to choose: print it with printable()); nothing when it is gone.
struct ProcStat {
  char state = 0;
  pid_t ppid = 0;
  std::string name;
};
std::optional<ProcStat> procStat(pid_t pid);

struct Child {
  pid_t pid;
  std::string name;  // its command name (comm)
};
// This process's children now: from /proc/self/task/*/children where the kernel keeps them
// (CONFIG_PROC_CHILDREN), else from every process's parent in /proc.
std::vector<Child> children();

}  // namespace gpool
