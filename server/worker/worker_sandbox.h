// Where a worker shuts itself in before it reads its client's first call: a Landlock ruleset (the kernel's
// sandbox for unprivileged processes, Linux 5.13+), so that a worker taken over by its client reaches no
// more of the host than a worker needs, even as gpool-server's own user (without --worker-uids):
// - files: it reads the system's libraries, /etc's few files the loader and the driver read, /sys, and /proc
//   but other processes' directories;
//   it opens NVIDIA's and RDMA's device files and the usual character devices; it reads and writes only its
//   host's module cache, its lease's user's JIT cache, /dev/shm (CUDA's and gpool's IPC records) and its own
//   /proc entry. Not gpool-server's
//   key, nor any home directory, /tmp, /var or /run;
// - processes: it cannot ptrace, nor read the memory, environment or command line of, any process outside its
//   own sandbox (gpool-server, other workers), and with Landlock ABI 6 (Linux 6.12) cannot signal them either;
//   it starts none of its own and keeps its parent-death signal (no_new_processes.h: seccomp, also where the
//   kernel has no Landlock).
// What a worker already holds (its client's socket, its lease's pages) stays usable: the ruleset restricts
// what it opens from now on. It binds every thread of the worker from Landlock ABI 8 (Linux 7.0); before it,
// the calling thread and those started after only (a worker starts its own threads once in: worker_main.cpp). gpool-server --no-worker-sandbox turns this off.
#pragma once

#include <string>
#include <vector>

namespace gpool::worker {

struct SandboxPaths {
  std::vector<std::string> read;   // files or directories (and what is below) to read, and to execute
  std::vector<std::string> write;  // to read, write, make, remove and move (within them) files and directories in
};

// What a worker needs beside the system's files: its module cache, its lease's user's JIT cache (either ""
// when it has none), its sim kernels' plugins, and the directories of LD_LIBRARY_PATH and its own program.
SandboxPaths workerPaths(const std::string& module_cache, const std::string& jit_cache, const std::vector<std::string>& plugins);

// Shuts this process in: returns the Landlock ABI it applied (1 and up), or 0 and `why` when the kernel has no
// Landlock (then only no_new_processes.h's filter holds), or -1 and `why` when applying either failed.
// `every_thread` (when given): whether Landlock binds every thread, those started before too (ABI 8, where
// the kernel accepts it; else the calling thread and those it starts after).
int enterSandbox(const SandboxPaths& paths, std::string& why, bool* every_thread = nullptr);

}  // namespace gpool::worker
