// What a kernel prints (device printf) reaches the program's own standard output, in order with what
// the program prints itself, at the synchronization that flushes it, as it does natively. The program
// points its fd 1 at a file while it runs the kernels, then reads the file back and checks the lines.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "checks.h"

extern "C" __global__ void gpool_test_say(int tag) {
  printf("gpool device says %d from thread %llu\n", tag, static_cast<unsigned long long>(threadIdx.x));
}

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));  // the context (and gpool's connection) exists before fd 1 moves
  char path[] = "/tmp/gpool-device-output-XXXXXX";
  int file = mkstemp(path);
  std::fflush(stdout);
  int saved = dup(STDOUT_FILENO);
  dup2(file, STDOUT_FILENO);
  std::printf("host: before\n");
  gpool_test_say<<<1, 2>>>(7);
  CK(cudaDeviceSynchronize());
  std::printf("host: between\n");
  gpool_test_say<<<1, 1>>>(8);
  CK(cudaDeviceSynchronize());
  std::printf("host: after\n");
  std::fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  close(file);
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  unlink(path);
  const std::string got = all.str();
  const std::string want =
      "host: before\n"
      "gpool device says 7 from thread 0\n"
      "gpool device says 7 from thread 1\n"
      "host: between\n"
      "gpool device says 8 from thread 0\n"
      "host: after\n";
  check(got == want, "the kernels' printf lines reach this process's stdout, in order with its own", got == want ? "" : got.c_str());
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
