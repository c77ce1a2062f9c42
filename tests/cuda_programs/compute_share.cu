// A lease's compute share (docs/admin.md, "Compute shares"): PROCS processes (forked before CUDA starts)
// each launch kernels that keep the device busy for KERNEL_US, synchronizing every 4, for SECONDS. The
// program prints what share of the device's time their kernels took together (their kernels' time over
// the wall time), and with MAX_SHARE > 0 checks it is at most that share (with 15% room and 2 points:
// what a share lets through after idling, and the work queued before it is measured). Each process first
// captures a graph in global mode on one stream while it launches on another, which pacing must not break.
// usage: compute_share [SECONDS=2] [KERNEL_US=1000] [MAX_SHARE=0] [PROCS=1]
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

extern "C" __global__ void gpool_test_spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  while (now - start < ns);
}

// A capture in global mode on one stream while kernels go to another: a paced worker's own timing (its
// events around those kernels) must not invalidate the client's capture. True when the graph was made and ran.
static bool captureBesidePacedLaunches(unsigned long long ns) {
  cudaStream_t captured, other;
  if (cudaStreamCreateWithFlags(&captured, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) != cudaSuccess)
    return false;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool ok = cudaStreamBeginCapture(captured, cudaStreamCaptureModeGlobal) == cudaSuccess;
  for (int k = 0; ok && k < 8; ++k) {
    gpool_test_spin<<<1, 1, 0, captured>>>(ns);
    gpool_test_spin<<<1, 1, 0, other>>>(ns);
  }
  ok = cudaStreamEndCapture(captured, &graph) == cudaSuccess && ok;
  ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess && cudaGraphLaunch(exec, captured) == cudaSuccess;
  ok = cudaDeviceSynchronize() == cudaSuccess && ok;
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(captured);
  cudaStreamDestroy(other);
  return ok;
}

// Launches for `seconds`; returns how many kernels ran, or -1.
static long spinFor(double seconds, unsigned long long ns) {
  if (cudaFree(nullptr) != cudaSuccess) return -1;  // the context, before the clock starts
  if (!captureBesidePacedLaunches(ns)) {
    std::printf("FAIL: a stream capture beside launches on another stream\n");
    return -1;
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  long launched = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (int k = 0; k < 4; ++k, ++launched) gpool_test_spin<<<1, 1>>>(ns);
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
  }
  return launched;
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  const double kernel_us = argc > 2 ? std::atof(argv[2]) : 1000.0;
  const double max_share = argc > 3 ? std::atof(argv[3]) : 0.0;
  const int procs = argc > 4 ? std::atoi(argv[4]) : 1;
  std::vector<int> pipes;
  const auto start = std::chrono::steady_clock::now();
  for (int p = 0; p < procs; ++p) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    if (fork() == 0) {
      close(fds[0]);
      long n = spinFor(seconds, static_cast<unsigned long long>(kernel_us * 1000));
      _exit(write(fds[1], &n, sizeof n) == sizeof n ? 0 : 1);
    }
    close(fds[1]);
    pipes.push_back(fds[0]);
  }
  long total = 0;
  bool ok = true;
  for (int fd : pipes) {
    long n = -1;
    if (read(fd, &n, sizeof n) != sizeof n || n < 0) ok = false;
    else total += n;
  }
  while (wait(nullptr) > 0) {
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double used = total * kernel_us / 1e6 / wall;
  std::printf("%ld kernels of %.0f us in %.2f s from %d process(es): %.3f of the device's time\n", total, kernel_us, wall,
              procs, used);
  if (!ok) {
    std::printf("FAIL: a process could not launch its kernels\n");
    return 1;
  }
  if (max_share > 0 && used > max_share * 1.15 + 0.02) {
    std::printf("FAIL: more than the share of %.2f\n", max_share);
    return 1;
  }
  if (max_share > 0) std::printf("ALL PASSED\n");
  return 0;
}
