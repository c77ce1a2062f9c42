// Runs a program in the sandbox gpool-worker shuts itself in (server/worker/worker_sandbox.h), as the worker
// would with the worker options among the program's arguments (--module-cache, --jit-cache, --sim-kernels): the stand-in
// for a worker taken over by its client (taken_over_worker.py) runs its attack from inside, as the real
// worker's code would after its client took it over. --also-read and --also-write add what the stand-in
// itself needs (its interpreter, its script, the directory of its report). Where the kernel has no Landlock,
// it runs the program unsandboxed, as the worker then runs.
// usage: sandboxed_as_worker [--also-read PATH]... [--also-write PATH]... -- PROGRAM [ARGS...]
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "worker_sandbox.h"

int main(int argc, char** argv) {
  std::vector<std::string> reads, writes, plugins;
  std::string module_cache, jit_cache;
  int at = 1;
  for (; at + 1 < argc && std::strcmp(argv[at], "--") != 0; at += 2) {
    if (std::strcmp(argv[at], "--also-read") == 0) reads.push_back(argv[at + 1]);
    else if (std::strcmp(argv[at], "--also-write") == 0) writes.push_back(argv[at + 1]);
    else break;
  }
  if (at >= argc || std::strcmp(argv[at], "--") != 0 || at + 1 >= argc) {
    std::fprintf(stderr, "usage: sandboxed_as_worker [--also-read PATH]... [--also-write PATH]... -- PROGRAM [ARGS...]\n");
    return 2;
  }
  char** program = argv + at + 1;
  for (int i = at + 2; i + 1 < argc; ++i) {  // (the worker's options, among the program's arguments)
    if (std::strcmp(argv[i], "--module-cache") == 0) module_cache = argv[i + 1];
    if (std::strcmp(argv[i], "--jit-cache") == 0) jit_cache = argv[i + 1];
    if (std::strcmp(argv[i], "--sim-kernels") == 0) plugins.push_back(argv[i + 1]);
  }
  gpool::worker::SandboxPaths paths = gpool::worker::workerPaths(module_cache, jit_cache, plugins);
  paths.read.insert(paths.read.end(), reads.begin(), reads.end());
  paths.write.insert(paths.write.end(), writes.begin(), writes.end());
  std::string why;
  int abi = gpool::worker::enterSandbox(paths, why);
  if (abi < 0) {
    std::fprintf(stderr, "sandboxed_as_worker: cannot enter the sandbox: %s\n", why.c_str());
    return 3;
  }
  if (abi == 0) std::fprintf(stderr, "sandboxed_as_worker: not sandboxed, as the worker would not be: %s\n", why.c_str());
  ::execv(program[0], program);
  std::perror("sandboxed_as_worker: exec");
  return 127;
}
