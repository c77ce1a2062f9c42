// Contexts beyond the primary one, and cudaDeviceReset: a created context is a context of its own to the
// program; a reset frees everything the program held on the device, and the runtime carries on after it.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <thread>
#include <vector>

#include "checks.h"
#include "increment.cuh"

namespace {

// Launches the kernel over n words and checks they went up by one.
bool incrementWorks() {
  const int n = 4096;
  std::vector<unsigned> h(n, 41);
  unsigned* d = nullptr;
  if (cudaMalloc(&d, n * sizeof(unsigned)) != cudaSuccess) return false;
  CK(cudaMemcpy(d, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  gpool_test_increment<<<(n + 255) / 256, 256>>>(d, n);
  CK(cudaGetLastError());
  CK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  for (unsigned v : h)
    if (v != 42) return false;
  return true;
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  auto create = driverEntryPoint<CUresult (*)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice)>("cuCtxCreate", 12050);
  auto destroy = driverEntryPoint<CUresult (*)(CUcontext)>("cuCtxDestroy");
  auto getCurrent = driverEntryPoint<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  auto pop = driverEntryPoint<CUresult (*)(CUcontext*)>("cuCtxPopCurrent");
  auto push = driverEntryPoint<CUresult (*)(CUcontext)>("cuCtxPushCurrent");
  auto getId = driverEntryPoint<CUresult (*)(CUcontext, unsigned long long*)>("cuCtxGetId");
  auto getDevice = driverEntryPoint<CUresult (*)(CUdevice*)>("cuCtxGetDevice");
  auto memAlloc = driverEntryPoint<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc");
  auto memFree = driverEntryPoint<CUresult (*)(CUdeviceptr)>("cuMemFree");

  CUcontext primary = nullptr, made = nullptr, cur = nullptr;
  check(getCurrent(&primary) == CUDA_SUCCESS && primary, "the runtime's primary context is current");
  check(create(&made, nullptr, 0, 0) == CUDA_SUCCESS && made && made != primary, "cuCtxCreate makes a new context");
  check(getCurrent(&cur) == CUDA_SUCCESS && cur == made, "the new context is current");
  unsigned long long id1 = 0, id2 = 0;
  CUdevice dev = -1;
  check(getId(primary, &id1) == CUDA_SUCCESS && getId(made, &id2) == CUDA_SUCCESS && id1 != id2, "the two contexts have different ids");
  check(getDevice(&dev) == CUDA_SUCCESS && dev == 0, "the new context is on device 0");
  CUdeviceptr p = 0;
  check(memAlloc(&p, 1 << 20) == CUDA_SUCCESS && memFree(p) == CUDA_SUCCESS, "memory is allocated and freed in the new context");
  auto streamCtx = driverEntryPoint<CUresult (*)(CUstream, CUcontext*)>("cuStreamGetCtx", 9020);
  CUcontext of = nullptr;
  check(streamCtx(nullptr, &of) == CUDA_SUCCESS && of == made, "the default stream is the current (new) context's");
  check(pop(&cur) == CUDA_SUCCESS && cur == made, "cuCtxPopCurrent returns it");
  check(getCurrent(&cur) == CUDA_SUCCESS && cur == primary, "the primary context is current again");
  check(push(made) == CUDA_SUCCESS && pop(&cur) == CUDA_SUCCESS && cur == made, "cuCtxPushCurrent and pop again");
  check(destroy(made) == CUDA_SUCCESS, "cuCtxDestroy");
  check(destroy(made) == CUDA_ERROR_INVALID_CONTEXT, "a destroyed context cannot be destroyed again");
  check(destroy(primary) == CUDA_ERROR_INVALID_CONTEXT, "the primary context is not destroyed by cuCtxDestroy");

  // A context destroyed while another thread has it current: that thread's calls on it are refused with
  // CUDA_ERROR_CONTEXT_IS_DESTROYED, as the driver says it refuses them.
  {
    CUcontext doomed = nullptr;
    CK(static_cast<cudaError_t>(create(&doomed, nullptr, 0, 0)));
    CK(static_cast<cudaError_t>(pop(&cur)));
    std::atomic<int> step{0};
    CUresult seen = CUDA_SUCCESS;
    std::thread other([&] {
      push(doomed);
      step = 1;
      while (step.load() != 2) std::this_thread::yield();
      CUdeviceptr q = 0;
      seen = memAlloc(&q, 4096);
      if (seen == CUDA_SUCCESS) memFree(q);
      CUcontext popped = nullptr;
      pop(&popped);
    });
    while (step.load() != 1) std::this_thread::yield();
    check(destroy(doomed) == CUDA_SUCCESS, "a context another thread has current is destroyed");
    step = 2;
    other.join();
    CHECK(seen == CUDA_ERROR_CONTEXT_IS_DESTROYED, "that thread's allocation is refused: the context is destroyed (%d)", static_cast<int>(seen));
  }

  // The deprecated usage count: attached twice, a created context lives until its third detach.
  auto attach = driverEntryPoint<CUresult (*)(CUcontext*, unsigned)>("cuCtxAttach", 2000);
  auto detach = driverEntryPoint<CUresult (*)(CUcontext)>("cuCtxDetach", 4000);
  CUcontext counted = nullptr, got = nullptr;
  CK(static_cast<cudaError_t>(create(&counted, nullptr, 0, 0)));
  check(attach(&got, 0) == CUDA_SUCCESS && got == counted && attach(&got, 0) == CUDA_SUCCESS, "cuCtxAttach adds a use of the current context");
  check(detach(counted) == CUDA_SUCCESS && detach(counted) == CUDA_SUCCESS && getId(counted, &id2) == CUDA_SUCCESS,
        "two detaches leave the context its creation's use");
  check(detach(counted) == CUDA_SUCCESS && getId(counted, &id2) == CUDA_ERROR_INVALID_CONTEXT, "the last detach destroys it");
  check(getCurrent(&cur) == CUDA_SUCCESS && cur == primary, "and the primary context is current again");

  // A cooperative launch (the grid may synchronise) goes through as a launch with that attribute.
  {
    const int n = 1024;
    std::vector<unsigned> h(n, 1);
    unsigned* d = nullptr;
    CK(cudaMalloc(&d, n * sizeof(unsigned)));
    CK(cudaMemcpy(d, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    int count = n;
    void* args[] = {&d, &count};
    CK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(gpool_test_increment), dim3(n / 256), dim3(256), args, 0, nullptr));
    CK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (unsigned v : h) ok &= v == 2;
    check(ok, "cudaLaunchCooperativeKernel runs the kernel");
    CK(cudaFree(d));
  }

  // cudaDeviceReset frees everything the program held.
  check(incrementWorks(), "a kernel runs before the reset");
  size_t free0 = 0, total = 0, free1 = 0, free2 = 0;
  CK(cudaMemGetInfo(&free0, &total));
  void* held = nullptr;
  CK(cudaMalloc(&held, 32u << 20));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CK(cudaMemGetInfo(&free1, &total));
  check(free1 + (32u << 20) <= free0, "32 MiB held before the reset");
  CK(cudaDeviceReset());
  CK(cudaSetDevice(0));
  CK(cudaMemGetInfo(&free2, &total));
  check(free2 >= free0, "after cudaDeviceReset the memory is free again");
  check(cudaMemset(held, 0, 16) != cudaSuccess, "memory from before the reset is gone");
  cudaGetLastError();
  check(incrementWorks(), "a kernel runs after the reset (its module loaded again)");
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
