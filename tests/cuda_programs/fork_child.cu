// A process that forks after it has used CUDA (Python's multiprocessing and PyTorch's DataLoader fork by
// default on Linux): the child inherits none of CUDA's state, so its CUDA calls fail with an
// initialization error, as CUDA's do, and the parent's device, memory and streams go on untouched. A child
// that touched the parent's connection to its worker would garble it for both. And a program it execs
// inherits none of gpool's sockets.
#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda.h>

#include "checks.h"
#include "increment.cuh"

namespace {

constexpr int kWords = 4096;

using CuInit = CUresult (*)(unsigned);

// The child's calls, each of which must fail without reaching the parent's worker; exits with how many
// did not. cuInit says so first, as CUDA's does (Triton probes a forked compile worker with it).
[[noreturn]] void child(unsigned* d, CuInit cu_init) {
  int wrong = 0;
  void* p = nullptr;
  unsigned word = 0;
  cudaStream_t s = nullptr;
  int count = 0;
  if (cu_init(0) != CUDA_ERROR_NOT_INITIALIZED) ++wrong;
  if (cudaMalloc(&p, 1 << 20) == cudaSuccess) ++wrong;
  if (cudaMemcpy(&word, d, sizeof word, cudaMemcpyDeviceToHost) == cudaSuccess) ++wrong;
  if (cudaMemset(d, 0xff, kWords * sizeof(unsigned)) == cudaSuccess) ++wrong;
  gpool_test_increment<<<kWords / 256, 256>>>(d, kWords);
  if (cudaDeviceSynchronize() == cudaSuccess) ++wrong;
  if (cudaStreamCreate(&s) == cudaSuccess) ++wrong;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && cudaFree(d) == cudaSuccess) ++wrong;
  std::exit(wrong);  // a normal exit: the runtime's and gpool's exit handlers run in the child too
}

}  // namespace

int main() {
  unsigned* d = nullptr;
  CK(cudaMalloc(&d, kWords * sizeof(unsigned)));
  std::vector<unsigned> h(kWords);
  for (int i = 0; i < kWords; ++i) h[i] = static_cast<unsigned>(i * 3);
  CK(cudaMemcpy(d, h.data(), kWords * sizeof(unsigned), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  auto cu_init = driverEntryPoint<CuInit>("cuInit");
  check(cu_init(0) == CUDA_SUCCESS, "cuInit in the parent");
  std::fflush(stdout);

  pid_t pid = fork();
  if (pid == 0) child(d, cu_init);
  int status = 0;
  check(pid > 0 && waitpid(pid, &status, 0) == pid, "fork and wait for the child");
  char detail[96];
  std::snprintf(detail, sizeof detail, "exit status %d, signal %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "every CUDA call of the forked child fails, and it exits normally", detail);

  // The parent's connection, memory and stream are as they were.
  gpool_test_increment<<<kWords / 256, 256, 0, stream>>>(d, kWords);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(stream));
  std::vector<unsigned> back(kWords, 0);
  CK(cudaMemcpy(back.data(), d, kWords * sizeof(unsigned), cudaMemcpyDeviceToHost));
  bool same = true;
  for (int i = 0; i < kWords; ++i) same = same && back[i] == h[i] + 1;
  check(same, "the parent's memory is untouched by the child, and its kernel and copies still run");
  CK(cudaStreamDestroy(stream));
  CK(cudaFree(d));

  // Forked again after the parent's own work, the child still gets nothing, and a child that only exits
  // leaves the parent's connection as it was.
  std::fflush(stdout);
  pid = fork();
  if (pid == 0) std::exit(0);
  check(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "a child that only exits");
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  CK(cudaMalloc(&d, 64));
  CK(cudaFree(d));
  check(count >= 1, "the parent goes on after its children");

  // A program the process execs inherits none of gpool's sockets (its end would keep the connection
  // open for the worker after this process has gone). Only gpool opens sockets in this program, except
  // over UCX, whose own sockets are UCX's (the worker sees this process go by gpool's TCP connection).
  const char* transport = std::getenv("GPOOL_TRANSPORT");
  if (transport && std::strcmp(transport, "rdma") == 0) {
    std::printf("SKIP  close-on-exec of sockets: UCX opens sockets of its own\n");
    if (failures == 0) std::printf("ALL PASSED\n");
    return failures ? 1 : 0;
  }
  int sockets = 0, inherited = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(dir)) {
      char path[300], target[64] = {};
      std::snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
      if (readlink(path, target, sizeof target - 1) <= 0 || std::strncmp(target, "socket:", 7) != 0) continue;
      ++sockets;
      if (!(fcntl(std::atoi(e->d_name), F_GETFD) & FD_CLOEXEC)) ++inherited;
    }
    closedir(dir);
  }
  std::snprintf(detail, sizeof detail, "%d sockets, %d without close-on-exec", sockets, inherited);
  check(inherited == 0, "gpool's sockets are closed on exec", detail);  // natively there are none
  if (failures == 0) std::printf("ALL PASSED\n");
  return failures ? 1 : 0;
}
