// Runs unmodified through gpool (and natively): device queries, copies of many sizes, memsets,
// streams and events, and a kernel whose result is checked. Prints one line per check; exits 1 on a
// failure. gpool's sim backend runs the kernels through host implementations in sim_kernels.cpp.
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "checks.h"
#include "increment.cuh"

extern "C" __global__ void gpool_test_saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

static void roundTrip(size_t n) {
  std::vector<unsigned char> src(n), dst(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  void* d = nullptr;
  CK(cudaMalloc(&d, n));
  CK(cudaMemcpy(d, src.data(), n, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dst.data(), d, n, cudaMemcpyDeviceToHost));
  // device-to-device into a second buffer and back
  void* d2 = nullptr;
  CK(cudaMalloc(&d2, n));
  CK(cudaMemcpy(d2, d, n, cudaMemcpyDeviceToDevice));
  std::vector<unsigned char> dst2(n, 0);
  CK(cudaMemcpy(dst2.data(), d2, n, cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  CK(cudaFree(d2));
  char what[64];
  std::snprintf(what, sizeof what, "memcpy round trip %zu bytes", n);
  check(src == dst && src == dst2, what);
}

int main() {
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  check(count >= 1, "cudaGetDeviceCount >= 1");
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  char detail[512];
  std::snprintf(detail, sizeof detail, "%s, cc %d.%d, %d SMs, %.1f GiB", prop.name, prop.major, prop.minor,
                prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
  check(prop.totalGlobalMem > 0 && prop.multiProcessorCount > 0 && prop.major >= 5, "cudaGetDeviceProperties", detail);
  int driver = 0, runtime = 0;
  CK(cudaDriverGetVersion(&driver));
  CK(cudaRuntimeGetVersion(&runtime));
  std::snprintf(detail, sizeof detail, "driver %d, runtime %d", driver, runtime);
  check(driver >= runtime, "driver version covers the runtime", detail);
  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  check(total_b > 0 && free_b <= total_b, "cudaMemGetInfo");

  for (size_t n : {size_t{1}, size_t{3}, size_t{4096}, size_t{(1 << 20) + 7}, size_t{16} << 20, size_t{256} << 20}) roundTrip(n);

  // memsets
  {
    const size_t n = 1 << 20;
    unsigned char* d = nullptr;
    CK(cudaMalloc(&d, n));
    CK(cudaMemset(d, 0xab, n));
    CK(cudaMemset(d + 100, 0x11, 50));
    std::vector<unsigned char> h(n);
    CK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (size_t i = 0; i < n; ++i) ok &= h[i] == ((i >= 100 && i < 150) ? 0x11 : 0xab);
    check(ok, "cudaMemset values and bounds");
    CK(cudaFree(d));
  }

  // streams, events, ordering: two streams, the second waits on an event recorded in the first
  {
    const int n = 1 << 16;
    unsigned* d = nullptr;
    CK(cudaMalloc(&d, n * sizeof(unsigned)));
    cudaStream_t s1, s2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreate(&s2));
    cudaEvent_t start, mid, stop;
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&mid));
    CK(cudaEventCreate(&stop));
    CK(cudaEventRecord(start, s1));
    CK(cudaMemsetAsync(d, 0, n * sizeof(unsigned), s1));
    for (int k = 0; k < 10; ++k) gpool_test_increment<<<(n + 255) / 256, 256, 0, s1>>>(d, n);
    CK(cudaGetLastError());
    CK(cudaEventRecord(mid, s1));
    CK(cudaStreamWaitEvent(s2, mid, 0));
    for (int k = 0; k < 5; ++k) gpool_test_increment<<<(n + 255) / 256, 256, 0, s2>>>(d, n);
    CK(cudaEventRecord(stop, s2));
    std::vector<unsigned> h(n);
    CK(cudaMemcpyAsync(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s2));
    CK(cudaStreamSynchronize(s2));
    bool ok = true;
    for (int i = 0; i < n; ++i) ok &= h[i] == 15;
    check(ok, "stream order: 10 increments, event, wait, 5 increments = 15");
    CK(cudaEventSynchronize(stop));
    check(cudaEventQuery(stop) == cudaSuccess, "cudaEventQuery after synchronize");
    float ms = -1;
    CK(cudaEventElapsedTime(&ms, start, stop));
    std::snprintf(detail, sizeof detail, "%.3f ms", ms);
    check(ms >= 0, "cudaEventElapsedTime", detail);
    CK(cudaStreamDestroy(s1));
    CK(cudaStreamDestroy(s2));
    CK(cudaEventDestroy(start));
    CK(cudaEventDestroy(mid));
    CK(cudaEventDestroy(stop));
    CK(cudaFree(d));
  }

  // a kernel with mixed parameter types, result checked
  {
    const int n = 100000;
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i);
      y[i] = 1.0f;
    }
    float *dx = nullptr, *dy = nullptr;
    CK(cudaMalloc(&dx, n * sizeof(float)));
    CK(cudaMalloc(&dy, n * sizeof(float)));
    CK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    gpool_test_saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, dx, dy);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int i = 0; i < n; ++i) ok &= y[i] == 2.0f * i + 1.0f;
    check(ok, "saxpy kernel result");
    CK(cudaFree(dx));
    CK(cudaFree(dy));
  }

  // cudaLaunchKernelEx (reaches cuLaunchKernelEx) and a driver-API launch with an `extra` parameter
  // buffer, the driver entry point obtained through the runtime (cuGetProcAddress underneath)
  {
    const int n = 4096;
    std::vector<float> x(n), y(n, 0.5f);
    for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 97);
    float *dx = nullptr, *dy = nullptr;
    CK(cudaMalloc(&dx, n * sizeof(float)));
    CK(cudaMalloc(&dy, n * sizeof(float)));
    CK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3((n + 127) / 128);
    cfg.blockDim = dim3(128);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributePriority;
    attr[0].val.priority = 0;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, gpool_test_saxpy, n, 3.0f, (const float*)dx, dy));  // y = 3x + 0.5
    using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void**, void**);
    LaunchFn launch = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", reinterpret_cast<void**>(&launch), 12000, cudaEnableDefault, &q));
    cudaFunction_t fn;
    CK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(gpool_test_saxpy)));
    struct {
      int n;
      float a;
      const float* x;
      float* y;
    } args{n, 1.0f, dx, dy};  // the CUDA ABI layout: offsets 0, 4, 8, 16
    size_t args_size = sizeof args;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &args_size, CU_LAUNCH_PARAM_END};
    CUresult r = launch(reinterpret_cast<CUfunction>(fn), (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, nullptr, extra);
    check(r == CUDA_SUCCESS && q == cudaDriverEntryPointSuccess, "driver cuLaunchKernel with an extra buffer accepted");
    CK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int i = 0; i < n; ++i) ok &= y[i] == 4.0f * x[i] + 0.5f;  // 3x + 0.5, then + x
    check(ok, "cudaLaunchKernelEx and extra-buffer launch results");
    CK(cudaFree(dx));
    CK(cudaFree(dy));
  }

  // pinned host memory with async copies
  {
    const size_t n = 8 << 20;
    unsigned char *h = nullptr, *back = nullptr;
    CK(cudaMallocHost(&h, n));
    CK(cudaHostAlloc(&back, n, cudaHostAllocDefault));
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<unsigned char>(i * 7);
    void* d = nullptr;
    CK(cudaMalloc(&d, n));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    CK(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(back, d, n, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    check(std::memcmp(h, back, n) == 0, "pinned async copies");
    // cudaMemcpyDefault infers directions from the pointers
    std::memset(back, 0, n);
    CK(cudaMemcpy(back, d, n, cudaMemcpyDefault));
    check(std::memcmp(h, back, n) == 0, "cudaMemcpyDefault direction inference");
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d));
    CK(cudaFreeHost(h));
    CK(cudaFreeHost(back));
  }

  // TMA descriptors (Hopper): encoded by the driver, as Triton and cuBLASLt ask for them
  {
    using EncodeFn = decltype(&cuTensorMapEncodeTiled);
    using ReplaceFn = decltype(&cuTensorMapReplaceAddress);
    EncodeFn encode = nullptr;
    ReplaceFn replace = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000, cudaEnableDefault, &q));
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapReplaceAddress", reinterpret_cast<void**>(&replace), 12000, cudaEnableDefault, &q));
    float *a = nullptr, *b = nullptr;
    CK(cudaMalloc(&a, 256 * 128 * sizeof(float)));
    CK(cudaMalloc(&b, 256 * 128 * sizeof(float)));
    CUtensorMap map{};
    cuuint64_t dims[2] = {128, 256}, strides[1] = {128 * sizeof(float)};
    cuuint32_t box[2] = {32, 32}, estrides[2] = {1, 1};
    CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, a, dims, strides, box, estrides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    CUtensorMap other = map;
    CUresult r2 = replace(&other, b);
    CUresult r3 = encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 9, a, dims, strides, box, estrides,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    check(r == CUDA_SUCCESS && r2 == CUDA_SUCCESS && std::memcmp(&map, &other, sizeof map) != 0 && r3 == CUDA_ERROR_INVALID_VALUE,
          "cuTensorMapEncodeTiled, cuTensorMapReplaceAddress, and a rank of 9 refused");
    CK(cudaFree(a));
    CK(cudaFree(b));
  }

  // mapped host memory: copies through its device pointer work; a kernel reading it works natively and
  // through gpool over shared memory (the worker maps it, host_pool.h); over TCP (where the GPU may be on
  // another machine) it is refused with cudaErrorNotSupported
  {
    const int n = 4096;
    float* h = nullptr;
    CK(cudaHostAlloc(&h, n * sizeof(float), cudaHostAllocMapped));
    for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i);
    float* hd = nullptr;
    CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&hd), h, 0));
    unsigned flags = 0;
    CK(cudaHostGetFlags(&flags, h));
    check(hd != nullptr && (flags & cudaHostAllocMapped), "cudaHostGetDevicePointer and cudaHostGetFlags on mapped memory");
    float* d = nullptr;
    CK(cudaMalloc(&d, n * sizeof(float)));
    CK(cudaMemcpy(d, hd, n * sizeof(float), cudaMemcpyDefault));  // from the mapped device pointer
    std::vector<float> back(n, -1.0f);
    CK(cudaMemcpy(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool same = true;
    for (int i = 0; i < n; ++i) same &= back[i] == h[i];
    check(same, "copy from a mapped host pointer");
    gpool_test_saxpy<<<(n + 255) / 256, 256>>>(n, 1.0f, hd, d);  // reads host memory from the kernel
    cudaError_t e = cudaGetLastError();
    const char* transport = std::getenv("GPOOL_TRANSPORT");
    bool apart = transport && (std::strcmp(transport, "tcp") == 0 || std::strcmp(transport, "rdma") == 0);
    // (a chain of servers, run_through_gpool.sh's: the cuda backend registers the shared pages with its own
    // gpool client library, which has no memory shared with the sim worker behind it for them)
    apart |= std::getenv("GPOOL_TEST_CHAIN") != nullptr;
    if (std::getenv("GPOOL_SERVER") && apart) {  // no memory shared with the worker
      if (e == cudaSuccess) e = cudaDeviceSynchronize();  // (refused by the worker, the launch's error comes at a wait)
      // The same check name natively and through gpool, so gpu_check.sh compares them as one check.
      check(e == cudaErrorNotSupported, "kernel given mapped host memory (native and shm: reads it; tcp, rdma: refused)",
            cudaGetErrorName(e));
    } else {
      CK(e);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
      check(back[7] == 14.0f, "kernel given mapped host memory (native and shm: reads it; tcp, rdma: refused)");
      // ...and writes it: the kernel's output lands in the host's own pages.
      gpool_test_saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, d, hd);
      CK(cudaDeviceSynchronize());
      check(h[7] == 14.0f * 2.0f + 7.0f, "kernel writes mapped host memory the program then reads", std::to_string(h[7]).c_str());
    }
    CK(cudaFree(d));
    CK(cudaFreeHost(h));
  }

  // stream capture into a CUDA graph, replayed twice
  {
    const int n = 1000;
    std::vector<float> x(n), y(n, 1.0f);
    for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 13);
    float *dx, *dy;
    CK(cudaMalloc(&dx, n * sizeof(float)));
    CK(cudaMalloc(&dy, n * sizeof(float)));
    CK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CK(cudaStreamIsCapturing(s, &status));
    check(status == cudaStreamCaptureStatusNone, "stream not capturing before capture");
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaStreamIsCapturing(s, &status));
    unsigned long long id = 0;
    CK(cudaStreamGetCaptureInfo(s, &status, &id));
    check(status == cudaStreamCaptureStatusActive && id != 0, "stream capture active, with an id");
    gpool_test_saxpy<<<(n + 255) / 256, 256, 0, s>>>(n, 2.0f, dx, dy);  // y = 2x + y
    CK(cudaMemsetAsync(dx, 0, sizeof(float), s));                     // x[0] = 0 on replay
    cudaGraph_t graph;
    CK(cudaStreamEndCapture(s, &graph));
    size_t nodes = 0;
    CK(cudaGraphGetNodes(graph, nullptr, &nodes));
    check(nodes == 2, "captured graph has two nodes");
    CK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    check(y[5] == 1.0f, "captured work did not run at capture time");
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool ok = y[0] == 1.0f;  // x[0] was 0 from the start
    for (int i = 1; i < n; ++i) ok &= y[i] == 1.0f + 4.0f * x[i];
    check(ok, "graph replayed twice: y = 1 + 2 * 2x");
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(s));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
  }

  // errors come back as CUDA errors
  {
    void* d = nullptr;
    cudaError_t e = cudaMalloc(&d, size_t{1} << 62);
    check(e == cudaErrorMemoryAllocation, "absurd cudaMalloc fails with cudaErrorMemoryAllocation", cudaGetErrorName(e));
    cudaGetLastError();
  }

  CK(cudaDeviceSynchronize());
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "ALL PASSED", failures);
  return failures ? 1 : 0;
}
