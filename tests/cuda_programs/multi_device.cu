// A program for two devices (`gpool run -n 2`): memory on each, copies between them both ways (peer
// copies and cudaMemcpyDefault), a kernel on each, and a stream on one device that waits for an event
// recorded on the other; every value is checked. Devices of a lease are separate workers, so kernels get
// no peer access, and the program checks that it is told so. Prints one line per check and ALL PASSED.
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "checks.h"
#include "increment.cuh"

extern "C" __global__ void gpool_test_spin(unsigned long long ns) {  // (on sim: sim_kernels.cpp's)
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  while (now - start < ns);
}

constexpr int kN = 1 << 20;  // 4 MiB per buffer: copies span more than one protocol chunk
constexpr size_t kBytes = kN * sizeof(unsigned);

static std::vector<unsigned> fetch(const unsigned* d) {
  std::vector<unsigned> h(kN);
  CK(cudaMemcpy(h.data(), d, kBytes, cudaMemcpyDefault));
  return h;
}

static bool holds(const std::vector<unsigned>& h, unsigned base) {
  for (int i = 0; i < kN; ++i)
    if (h[i] != base + static_cast<unsigned>(i)) return false;
  return true;
}

int main() {
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  char detail[256];
  std::snprintf(detail, sizeof detail, "%d devices", count);
  check(count == 2, "cudaGetDeviceCount is the lease's 2 shares", detail);
  if (count < 2) return 1;

  // Two shares of one GPU are two devices, and devices have distinct UUIDs (frameworks and NVML tell
  // them apart by UUID).
  cudaDeviceProp props[2]{};
  CK(cudaGetDeviceProperties(&props[0], 0));
  CK(cudaGetDeviceProperties(&props[1], 1));
  check(std::memcmp(&props[0].uuid, &props[1].uuid, sizeof props[0].uuid) != 0, "the two devices have distinct UUIDs");

  unsigned* buf[2];
  cudaStream_t stream[2];
  std::vector<unsigned> host(kN);
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, d));
    std::snprintf(detail, sizeof detail, "device %d: %s", d, prop.name);
    check(prop.totalGlobalMem > 0, "each device has its properties", detail);
    CK(cudaMalloc(&buf[d], kBytes));
    CK(cudaStreamCreateWithFlags(&stream[d], cudaStreamNonBlocking));
    for (int i = 0; i < kN; ++i) host[i] = 1000000u * (d + 1) + i;
    CK(cudaMemcpy(buf[d], host.data(), kBytes, cudaMemcpyHostToDevice));
    gpool_test_increment<<<kN / 256, 256, 0, stream[d]>>>(buf[d], kN);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(stream[d]));
  }
  check(holds(fetch(buf[0]), 1000001u) && holds(fetch(buf[1]), 2000001u), "a kernel on each device, values checked");

  auto a = reinterpret_cast<uintptr_t>(buf[0]), b = reinterpret_cast<uintptr_t>(buf[1]);
  check(a + kBytes <= b || b + kBytes <= a, "the two devices' allocations do not overlap");
  for (int d = 0; d < 2; ++d) {
    cudaPointerAttributes attr{};
    CK(cudaPointerGetAttributes(&attr, buf[d]));
    std::snprintf(detail, sizeof detail, "buffer of device %d says device %d", d, attr.device);
    check(attr.type == cudaMemoryTypeDevice && attr.device == d, "a pointer names its device", detail);
  }

  // Device 1 -> device 0 with a peer copy, device 0 -> device 1 with cudaMemcpyDefault.
  unsigned* copy[2];
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&copy[d], kBytes));
  }
  CK(cudaSetDevice(0));
  CK(cudaMemcpyPeer(copy[0], 0, buf[1], 1, kBytes));
  CK(cudaMemcpy(copy[1], buf[0], kBytes, cudaMemcpyDefault));
  check(holds(fetch(copy[0]), 2000001u), "copy from device 1 to device 0 (cudaMemcpyPeer)");
  check(holds(fetch(copy[1]), 1000001u), "copy from device 0 to device 1 (cudaMemcpyDefault)");

  // Small allocations too (on sim too small to share between workers: relayed through the client).
  unsigned* small[2];
  unsigned words[256], back[256];
  for (int i = 0; i < 256; ++i) words[i] = 7u * i + 3u;
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&small[d], sizeof words));
  }
  CK(cudaMemcpy(small[0], words, sizeof words, cudaMemcpyHostToDevice));
  CK(cudaMemcpyPeer(small[1], 1, small[0], 0, sizeof words));
  CK(cudaMemcpy(back, small[1], sizeof back, cudaMemcpyDeviceToHost));
  check(std::memcmp(words, back, sizeof words) == 0, "a 1 KiB copy from device 0 to device 1");

  // A kernel on device 0, an event after it; device 1's stream waits for the event, then copies the
  // result across: it must see the kernel's values, not the ones before it.
  cudaEvent_t done;
  CK(cudaSetDevice(0));
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  for (int k = 0; k < 5; ++k) gpool_test_increment<<<kN / 256, 256, 0, stream[0]>>>(buf[0], kN);
  CK(cudaEventRecord(done, stream[0]));
  CK(cudaSetDevice(1));
  CK(cudaStreamWaitEvent(stream[1], done, 0));
  CK(cudaMemcpyPeerAsync(copy[1], 1, buf[0], 0, kBytes, stream[1]));
  gpool_test_increment<<<kN / 256, 256, 0, stream[1]>>>(copy[1], kN);
  CK(cudaStreamSynchronize(stream[1]));
  check(holds(fetch(copy[1]), 1000007u), "device 1 waits for device 0's event, copies, launches: values in order");

  // A launch on device 1 that records one of device 1's events through a launch attribute.
  cudaEvent_t launched;
  CK(cudaSetDevice(1));
  CK(cudaEventCreateWithFlags(&launched, cudaEventDisableTiming));
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeLaunchCompletionEvent;
  attr.val.launchCompletionEvent.event = launched;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(kN / 256);
  config.blockDim = dim3(256);
  config.stream = stream[1];
  config.attrs = &attr;
  config.numAttrs = 1;
  CK(cudaLaunchKernelEx(&config, gpool_test_increment, copy[1], kN));
  CK(cudaEventSynchronize(launched));
  CK(cudaStreamSynchronize(stream[1]));
  check(holds(fetch(copy[1]), 1000008u), "a launch on device 1 with one of its events as a launch attribute");
  CK(cudaEventDestroy(launched));

  // cuCtxSynchronize_v2 names a context that need not be current: device 1's, with device 0 current, waits
  // for device 1's work.
  auto getCurrent = driverEntryPoint<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  auto synchronize = driverEntryPoint<CUresult (*)(CUcontext)>("cuCtxSynchronize", 13000);  // (cuCtxSynchronize_v2)
  CUcontext ctx1 = nullptr;
  CK(cudaSetDevice(1));
  check(getCurrent(&ctx1) == CUDA_SUCCESS && ctx1 != nullptr, "device 1's context");
  gpool_test_spin<<<1, 1, 0, stream[1]>>>(300000000ull);  // 0.3 s
  CK(cudaGetLastError());
  CK(cudaSetDevice(0));
  auto since = std::chrono::steady_clock::now();
  CUresult synced = synchronize(ctx1);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  cudaError_t after = cudaStreamQuery(stream[1]);
  // (On sim a kernel runs as its worker reads it, so only the wait tells: the spin's 0.3 s, not device 0's none.)
  std::snprintf(detail, sizeof detail, "cuCtxSynchronize_v2 %d after %.3f s, then device 1's stream %d", synced, waited, after);
  check(synced == CUDA_SUCCESS && waited >= 0.25 && after == cudaSuccess,
        "cuCtxSynchronize_v2 of device 1's context, device 0 current, waits for device 1", detail);

  // A library's kernel is one handle for both devices, each with its own attributes: set on device 1 while
  // device 0 is current, the attribute is device 1's, and device 0's stays as it was.
  using SetKernelAttribute = CUresult (*)(CUfunction_attribute, int, CUkernel, CUdevice);
  using GetKernelAttribute = CUresult (*)(int*, CUfunction_attribute, CUkernel, CUdevice);
  auto setKernelAttribute = driverEntryPoint<SetKernelAttribute>("cuKernelSetAttribute");
  auto getKernelAttribute = driverEntryPoint<GetKernelAttribute>("cuKernelGetAttribute");
  cudaKernel_t kernel = nullptr;
  CK(cudaGetKernel(&kernel, gpool_test_increment));
  const auto most = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  int before0 = -1, on0 = -1, on1 = -1;
  CK(cudaSetDevice(0));
  CUresult got = getKernelAttribute(&before0, most, reinterpret_cast<CUkernel>(kernel), 0);
  CUresult set = setKernelAttribute(most, 65536, reinterpret_cast<CUkernel>(kernel), 1);
  getKernelAttribute(&on0, most, reinterpret_cast<CUkernel>(kernel), 0);
  getKernelAttribute(&on1, most, reinterpret_cast<CUkernel>(kernel), 1);
  std::snprintf(detail, sizeof detail, "get %d, set %d; device 0: %d before, %d after; device 1: %d", got, set, before0, on0, on1);
  check(got == CUDA_SUCCESS && set == CUDA_SUCCESS && on1 == 65536 && on0 == before0,
        "cuKernelSetAttribute on device 1, device 0 current: device 1's attribute", detail);
  int later1 = -1;  // (device 1's value was read, and so cached, above: setting it again must drop that)
  CUresult reset = setKernelAttribute(most, 32768, reinterpret_cast<CUkernel>(kernel), 1);
  getKernelAttribute(&later1, most, reinterpret_cast<CUkernel>(kernel), 1);
  std::snprintf(detail, sizeof detail, "set %d, device 1: %d", reset, later1);
  check(reset == CUDA_SUCCESS && later1 == 32768, "set again, device 1's attribute reads the new value", detail);

  // A function (CUfunction) belongs to its device's context: got on device 1, its attribute is set and read
  // on device 1 while device 0 is current, and device 0's copy of the kernel keeps its own.
  {
    using SetFuncAttribute = CUresult (*)(CUfunction, CUfunction_attribute, int);
    using GetFuncAttribute = CUresult (*)(int*, CUfunction_attribute, CUfunction);
    auto setFuncAttribute = driverEntryPoint<SetFuncAttribute>("cuFuncSetAttribute");
    auto getFuncAttribute = driverEntryPoint<GetFuncAttribute>("cuFuncGetAttribute");
    cudaFunction_t fn1 = nullptr;
    CK(cudaSetDevice(1));
    CK(cudaGetFuncBySymbol(&fn1, reinterpret_cast<const void*>(gpool_test_increment)));
    CK(cudaSetDevice(0));
    int zero_before = -1, zero_after = -1, one = -1;
    getKernelAttribute(&zero_before, most, reinterpret_cast<CUkernel>(kernel), 0);
    CUresult fset = setFuncAttribute(reinterpret_cast<CUfunction>(fn1), most, 16384);
    CUresult fget = getFuncAttribute(&one, most, reinterpret_cast<CUfunction>(fn1));
    getKernelAttribute(&zero_after, most, reinterpret_cast<CUkernel>(kernel), 0);
    std::snprintf(detail, sizeof detail, "set %d, get %d: %d; device 0's kernel: %d before, %d after", fset, fget, one,
                  zero_before, zero_after);
    check(fset == CUDA_SUCCESS && fget == CUDA_SUCCESS && one == 16384 && zero_after == zero_before,
          "cuFuncSetAttribute on device 1's function, device 0 current: device 1's", detail);
  }

  // Where a driver-API launch runs. A library's kernel (CUkernel) runs in its stream's context (CUDA 13's
  // cuda::launch gives it another device's stream and leaves the current device as it is), or the current
  // one for a default stream; a function (CUfunction) runs in its own device's context.
  {
    using Launch = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void**, void**);
    auto launchKernel = driverEntryPoint<Launch>("cuLaunchKernel");
    auto runs = [&](CUfunction f, CUstream s, unsigned* on, int device, const char* what) {
      std::vector<unsigned> before(256), after(256);
      CK(cudaSetDevice(device));
      CK(cudaMemcpy(before.data(), on, sizeof words, cudaMemcpyDeviceToHost));
      CK(cudaSetDevice(0));
      int n = 256;
      void* args[] = {&on, &n};
      CUresult launched = launchKernel(f, 1, 1, 1, 256, 1, 1, 0, s, args, nullptr);
      CK(cudaSetDevice(device));
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(after.data(), on, sizeof words, cudaMemcpyDeviceToHost));
      bool added = true;
      for (int i = 0; i < 256; ++i) added = added && after[i] == before[i] + 1;
      std::snprintf(detail, sizeof detail, "launch %d; word 0 %u -> %u", launched, before[0], after[0]);
      check(launched == CUDA_SUCCESS && added, what, detail);
    };
    cudaFunction_t fn1 = nullptr;
    CK(cudaSetDevice(1));
    CK(cudaGetFuncBySymbol(&fn1, reinterpret_cast<const void*>(gpool_test_increment)));
    runs(reinterpret_cast<CUfunction>(kernel), stream[1], small[1], 1,
         "cuLaunchKernel of a CUkernel on device 1's stream, device 0 current: runs on device 1");
    runs(reinterpret_cast<CUfunction>(kernel), nullptr, small[0], 0,
         "cuLaunchKernel of a CUkernel on the default stream: runs on the current device (0)");
    runs(reinterpret_cast<CUfunction>(fn1), nullptr, small[1], 1,
         "cuLaunchKernel of device 1's CUfunction on the default stream, device 0 current: runs on device 1");
    CK(cudaSetDevice(0));
    unsigned* own = small[0];
    int n = 256;
    void* args[] = {&own, &n};
    CUresult refused = launchKernel(reinterpret_cast<CUfunction>(fn1), 1, 1, 1, 256, 1, 1, 0, stream[0], args, nullptr);
    std::snprintf(detail, sizeof detail, "launch %d", refused);
    check(refused != CUDA_SUCCESS, "device 1's CUfunction on device 0's stream is refused", detail);

    // Occupancy is the device's where the function would run, with that device's attributes: device 1's
    // kernel allows 64 KiB of dynamic shared memory, device 0's does not.
    using Occupancy = CUresult (*)(int*, CUfunction, int, size_t);
    auto occupancy = driverEntryPoint<Occupancy>("cuOccupancyMaxActiveBlocksPerMultiprocessor");
    CK(cudaSetDevice(0));
    int kernel_on0 = -1, function_of1 = -1, kernel_on1 = -1;
    occupancy(&kernel_on0, reinterpret_cast<CUfunction>(kernel), 128, 64 << 10);  // (asked first: kept by gpool)
    CUresult allowed = setKernelAttribute(most, 64 << 10, reinterpret_cast<CUkernel>(kernel), 1);
    occupancy(&kernel_on0, reinterpret_cast<CUfunction>(kernel), 128, 64 << 10);
    occupancy(&function_of1, reinterpret_cast<CUfunction>(fn1), 128, 64 << 10);
    CK(cudaSetDevice(1));
    occupancy(&kernel_on1, reinterpret_cast<CUfunction>(kernel), 128, 64 << 10);
    CK(cudaSetDevice(0));
    std::snprintf(detail, sizeof detail, "set %d; blocks with 64 KiB: kernel on device 0 %d, device 1's function %d, "
                  "kernel on device 1 %d", allowed, kernel_on0, function_of1, kernel_on1);
    check(allowed == CUDA_SUCCESS && kernel_on0 == 0 && function_of1 > 0 && kernel_on1 > 0,
          "occupancy is the device's where the kernel or function runs", detail);

    // A graph of device 0's takes the library kernel (its copy there), but not device 1's function, which
    // would run in device 1's context (a graph is one device's here).
    CUgraph graph = nullptr;
    CK(cudaGraphCreate(reinterpret_cast<cudaGraph_t*>(&graph), 0));
    CUDA_KERNEL_NODE_PARAMS node{};
    node.gridDimX = node.gridDimY = node.gridDimZ = 1;
    node.blockDimX = 256;
    node.blockDimY = node.blockDimZ = 1;
    node.kernelParams = args;
    auto addKernelNode = driverEntryPoint<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                                       const CUDA_KERNEL_NODE_PARAMS*)>("cuGraphAddKernelNode");
    CUgraphNode added = nullptr;
    node.func = reinterpret_cast<CUfunction>(fn1);
    CUresult foreign = addKernelNode(&added, graph, nullptr, 0, &node);
    node.func = reinterpret_cast<CUfunction>(kernel);
    CUresult own_copy = addKernelNode(&added, graph, nullptr, 0, &node);
    std::vector<unsigned> before(256), after(256);
    CK(cudaMemcpy(before.data(), small[0], sizeof words, cudaMemcpyDeviceToHost));
    cudaGraphExec_t exec = nullptr;
    if (own_copy == CUDA_SUCCESS) {
      CK(cudaGraphInstantiate(&exec, reinterpret_cast<cudaGraph_t>(graph), 0));
      CK(cudaGraphLaunch(exec, stream[0]));
      CK(cudaStreamSynchronize(stream[0]));
      CK(cudaGraphExecDestroy(exec));
    }
    CK(cudaMemcpy(after.data(), small[0], sizeof words, cudaMemcpyDeviceToHost));
    CK(cudaGraphDestroy(reinterpret_cast<cudaGraph_t>(graph)));
    std::snprintf(detail, sizeof detail, "device 1's function: %d; the kernel: %d, word 0 %u -> %u", foreign, own_copy,
                  before[0], after[0]);
    check(foreign != CUDA_SUCCESS && own_copy == CUDA_SUCCESS && after[0] == before[0] + 1,
          "a graph kernel node takes the library kernel, not another device's function", detail);

    // A graph is no context's in CUDA: device 1's is changed while device 0 is current, then run.
    CK(cudaSetDevice(1));
    CK(cudaGraphCreate(reinterpret_cast<cudaGraph_t*>(&graph), 0));
    node.func = reinterpret_cast<CUfunction>(kernel);
    unsigned* theirs = small[1];
    void* their_args[] = {&theirs, &n};
    node.kernelParams = their_args;
    node.blockDimX = 128;  // (half the words, until the change)
    CK(static_cast<cudaError_t>(addKernelNode(&added, graph, nullptr, 0, &node)));
    CK(cudaSetDevice(0));
    auto setKernelNode = driverEntryPoint<CUresult (*)(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*)>("cuGraphKernelNodeSetParams");
    node.blockDimX = 256;
    CUresult changed = setKernelNode(added, &node);
    CK(cudaSetDevice(1));
    CK(cudaMemcpy(before.data(), small[1], sizeof words, cudaMemcpyDeviceToHost));
    CK(cudaGraphInstantiate(&exec, reinterpret_cast<cudaGraph_t>(graph), 0));
    CK(cudaGraphLaunch(exec, stream[1]));
    CK(cudaStreamSynchronize(stream[1]));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(reinterpret_cast<cudaGraph_t>(graph)));
    CK(cudaMemcpy(after.data(), small[1], sizeof words, cudaMemcpyDeviceToHost));
    CK(cudaSetDevice(0));
    std::snprintf(detail, sizeof detail, "set %d; word 255 %u -> %u", changed, before[255], after[255]);
    check(changed == CUDA_SUCCESS && after[255] == before[255] + 1,
          "cuGraphKernelNodeSetParams on device 1's graph, device 0 current", detail);

    // A graph runs in any stream (CUDA orders it after the stream's earlier work, and the stream's later
    // work after it): device 1's, launched on device 0's stream.
    CK(cudaSetDevice(1));
    CK(cudaGraphCreate(reinterpret_cast<cudaGraph_t*>(&graph), 0));
    CK(static_cast<cudaError_t>(addKernelNode(&added, graph, nullptr, 0, &node)));
    CK(cudaGraphInstantiate(&exec, reinterpret_cast<cudaGraph_t>(graph), 0));
    CK(cudaMemcpy(before.data(), small[1], sizeof words, cudaMemcpyDeviceToHost));
    CK(cudaSetDevice(0));
    cudaError_t ran = cudaGraphLaunch(exec, stream[0]);
    CK(cudaStreamSynchronize(stream[0]));
    CK(cudaSetDevice(1));
    CK(cudaMemcpy(after.data(), small[1], sizeof words, cudaMemcpyDeviceToHost));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(reinterpret_cast<cudaGraph_t>(graph)));
    CK(cudaSetDevice(0));
    std::snprintf(detail, sizeof detail, "launch %d; word 0 %u -> %u", ran, before[0], after[0]);
    check(ran == cudaSuccess && after[0] == before[0] + 1, "device 1's graph launched on device 0's stream runs on device 1",
          detail);
  }

  // Stream-ordered allocation on each device from its own pool; device 1's pool is set up while device
  // 0 is current, and what device 1 allocates is copied to device 0.
  CK(cudaSetDevice(0));
  unsigned* pooled = nullptr;
  CK(cudaMallocAsync(&pooled, sizeof words, stream[0]));
  CK(cudaFreeAsync(pooled, stream[0]));
  cudaMemPool_t pool0, pool1;
  CK(cudaDeviceGetDefaultMemPool(&pool0, 0));
  CK(cudaDeviceGetDefaultMemPool(&pool1, 1));
  check(pool0 != pool1, "each device has its own default pool");
  uint64_t threshold = 1 << 20, read_back = 0;
  CK(cudaMemPoolSetAttribute(pool1, cudaMemPoolAttrReleaseThreshold, &threshold));
  CK(cudaMemPoolGetAttribute(pool1, cudaMemPoolAttrReleaseThreshold, &read_back));
  check(read_back == threshold, "device 1's pool, set up while device 0 is current");
  CK(cudaSetDevice(1));
  CK(cudaMallocAsync(&pooled, sizeof words, stream[1]));
  CK(cudaMemcpyAsync(pooled, words, sizeof words, cudaMemcpyHostToDevice, stream[1]));
  CK(cudaStreamSynchronize(stream[1]));
  CK(cudaSetDevice(0));
  CK(cudaMemcpy(small[0], pooled, sizeof words, cudaMemcpyDefault));
  std::memset(back, 0, sizeof back);
  CK(cudaMemcpy(back, small[0], sizeof back, cudaMemcpyDeviceToHost));
  check(std::memcmp(words, back, sizeof words) == 0, "memory from device 1's pool (cudaMallocAsync) copied to device 0");
  CK(cudaSetDevice(1));
  CK(cudaFreeAsync(pooled, stream[1]));
  CK(cudaStreamSynchronize(stream[1]));
  // Allocated on device 1's stream while device 0 is current: the memory is device 1's.
  CK(cudaSetDevice(0));
  CK(cudaMallocAsync(&pooled, sizeof words, stream[1]));
  CK(cudaMemcpyAsync(pooled, words, sizeof words, cudaMemcpyHostToDevice, stream[1]));
  CK(cudaStreamSynchronize(stream[1]));
  cudaPointerAttributes where{};
  CK(cudaPointerGetAttributes(&where, pooled));
  std::memset(back, 0, sizeof back);
  CK(cudaMemcpy(back, pooled, sizeof back, cudaMemcpyDeviceToHost));
  std::snprintf(detail, sizeof detail, "device %d", where.device);
  check(where.device == 1 && std::memcmp(words, back, sizeof words) == 0,
        "cudaMallocAsync on device 1's stream while device 0 is current", detail);
  CK(cudaFreeAsync(pooled, stream[1]));
  CK(cudaStreamSynchronize(stream[1]));

  // Memory freed and allocated again (often at the same address) is the new allocation's to copy from.
  CK(cudaSetDevice(0));
  CK(cudaFree(buf[0]));
  CK(cudaMalloc(&buf[0], kBytes));
  for (int i = 0; i < kN; ++i) host[i] = 3000000u + i;
  CK(cudaMemcpy(buf[0], host.data(), kBytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(copy[1], buf[0], kBytes, cudaMemcpyDefault));
  check(holds(fetch(copy[1]), 3000000u), "a copy from memory freed and allocated again has the new values");

  // The same with stream-ordered memory: freed with cudaFreeAsync, allocated again, copied again.
  for (unsigned round = 0; round < 2; ++round) {
    unsigned* staged = nullptr;
    CK(cudaMallocAsync(&staged, kBytes, stream[0]));
    for (int i = 0; i < kN; ++i) host[i] = 4000000u + 1000000u * round + i;
    CK(cudaMemcpyAsync(staged, host.data(), kBytes, cudaMemcpyHostToDevice, stream[0]));
    CK(cudaStreamSynchronize(stream[0]));
    CK(cudaMemcpy(copy[1], staged, kBytes, cudaMemcpyDefault));
    std::snprintf(detail, sizeof detail, "round %u", round);
    check(holds(fetch(copy[1]), 4000000u + 1000000u * round), "a copy from stream-ordered memory freed and allocated again", detail);
    CK(cudaFreeAsync(staged, stream[0]));
    CK(cudaStreamSynchronize(stream[0]));
  }

  int can = -1;
  CK(cudaDeviceCanAccessPeer(&can, 1, 0));
  check(can == 0, "no peer access between two workers' devices (cudaDeviceCanAccessPeer 0)");
  cudaError_t e = cudaDeviceEnablePeerAccess(0, 0);
  std::snprintf(detail, sizeof detail, "%s", cudaGetErrorName(e));
  check(e == cudaErrorPeerAccessUnsupported, "cudaDeviceEnablePeerAccess says it is unsupported", detail);
  (void)cudaGetLastError();

  // A texture object on each device over that device's memory. Its value reaches kernels unchanged, so
  // two workers may give the same value (the sim's do); as in CUDA, a value means the current device's.
  cudaTextureObject_t tex[2] = {0, 0};
  cudaResourceDesc described{};
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeLinear;
    res.res.linear.devPtr = buf[d];
    res.res.linear.desc = cudaCreateChannelDesc<unsigned>();
    res.res.linear.sizeInBytes = kBytes;
    cudaTextureDesc td{};
    td.readMode = cudaReadModeElementType;
    CK(cudaCreateTextureObject(&tex[d], &res, &td, nullptr));
  }
  bool own = true;
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaGetTextureObjectResourceDesc(&described, tex[d]));
    own &= described.res.linear.devPtr == buf[d];
  }
  check(own, "each device's texture object describes that device's memory");
  CK(cudaSetDevice(1));
  CK(cudaDestroyTextureObject(tex[1]));
  CK(cudaSetDevice(0));
  CK(cudaGetTextureObjectResourceDesc(&described, tex[0]));
  check(described.res.linear.devPtr == buf[0], "destroying device 1's leaves device 0's");
  CK(cudaDestroyTextureObject(tex[0]));
  check(cudaDestroyTextureObject(tex[0]) != cudaSuccess, "both texture objects are gone");
  (void)cudaGetLastError();

  // An array of device 1's, filled and read back while device 0 is current: its copies go to its worker.
  {
    CK(cudaSetDevice(1));
    cudaChannelFormatDesc desc = cudaCreateChannelDesc<unsigned>();
    cudaArray_t arr = nullptr;
    CK(cudaMallocArray(&arr, &desc, 256, 4));
    CK(cudaSetDevice(0));
    std::vector<unsigned> in(1024), out(1024, 0);
    for (int i = 0; i < 1024; ++i) in[i] = 7u * i;
    CK(cudaMemcpy2DToArray(arr, 0, 0, in.data(), 1024, 1024, 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy2DFromArray(out.data(), 1024, arr, 0, 0, 1024, 4, cudaMemcpyDeviceToHost));
    check(out == in, "an array of device 1's, copied in and out while device 0 is current");
    for (int i = 0; i < 1024; ++i) in[i] = 5u * i + 1;
    CK(cudaMemcpy2DToArrayAsync(arr, 0, 0, in.data(), 1024, 1024, 4, cudaMemcpyHostToDevice, stream[0]));
    CK(cudaStreamSynchronize(stream[0]));
    CK(cudaMemcpy2DFromArray(out.data(), 1024, arr, 0, 0, 1024, 4, cudaMemcpyDeviceToHost));
    check(out == in, "an array of device 1's, copied in on device 0's stream");
    CK(cudaFreeArray(arr));
  }

  // Rectangles of device 1's memory while device 0 is current: a pointer says its device, as with 1D
  // copies (unified addressing), and a rectangle from device 0 to device 1 crosses between them.
  {
    constexpr size_t kPitch = 1024, kWidth = 768, kRows = 8;  // a 768-byte row every 1 KiB
    unsigned char *d1 = nullptr, *d0 = nullptr;
    CK(cudaSetDevice(1));
    CK(cudaMalloc(&d1, kPitch * kRows * 2));
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&d0, kPitch * kRows * 2));
    std::vector<unsigned char> in(kPitch * kRows), out(kPitch * kRows, 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 13 + 1);
    auto rowsMatch = [&](unsigned char fill) {  // out's rectangle holds in's, and the rest of each row `fill`
      for (size_t y = 0; y < kRows; ++y)
        for (size_t x = 0; x < kPitch; ++x)
          if (out[y * kPitch + x] != (x < kWidth ? in[y * kPitch + x] : fill)) return false;
      return true;
    };
    cudaError_t e1 = cudaMemset2D(d1, kPitch, 0x5a, kPitch, kRows);
    cudaError_t e2 = cudaMemcpy2D(d1, kPitch, in.data(), kPitch, kWidth, kRows, cudaMemcpyHostToDevice);
    cudaError_t e3 = cudaMemcpy2D(out.data(), kPitch, d1, kPitch, kPitch, kRows, cudaMemcpyDeviceToHost);
    std::snprintf(detail, sizeof detail, "%s, %s, %s", cudaGetErrorName(e1), cudaGetErrorName(e2), cudaGetErrorName(e3));
    check(e1 == cudaSuccess && e2 == cudaSuccess && e3 == cudaSuccess && rowsMatch(0x5a),
          "cudaMemset2D and cudaMemcpy2D in and out of device 1's memory while device 0 is current", detail);
    (void)cudaGetLastError();

    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7 + 2);
    e2 = cudaMemcpy2DAsync(d1, kPitch, in.data(), kPitch, kWidth, kRows, cudaMemcpyHostToDevice, stream[0]);
    CK(cudaStreamSynchronize(stream[0]));
    CK(cudaMemcpy2D(out.data(), kPitch, d1, kPitch, kPitch, kRows, cudaMemcpyDeviceToHost));
    std::snprintf(detail, sizeof detail, "%s", cudaGetErrorName(e2));
    check(e2 == cudaSuccess && rowsMatch(0x5a), "cudaMemcpy2DAsync into device 1's memory on device 0's stream", detail);
    (void)cudaGetLastError();

    // Device 0 -> device 1 and back, as rectangles (2D, then a 3D copy of two slices).
    std::fill(out.begin(), out.end(), 0);
    CK(cudaMemset2D(d0, kPitch, 0x11, kPitch, kRows * 2));
    CK(cudaMemcpy2D(d0, kPitch, in.data(), kPitch, kWidth, kRows, cudaMemcpyHostToDevice));
    CK(cudaSetDevice(1));
    CK(cudaMemset2D(d1, kPitch, 0x22, kPitch, kRows * 2));
    cudaError_t e4 = cudaMemcpy2D(d1, kPitch, d0, kPitch, kWidth, kRows, cudaMemcpyDefault);
    CK(cudaMemcpy2D(out.data(), kPitch, d1, kPitch, kPitch, kRows, cudaMemcpyDeviceToHost));
    std::snprintf(detail, sizeof detail, "%s", cudaGetErrorName(e4));
    check(e4 == cudaSuccess && rowsMatch(0x22), "cudaMemcpy2D from device 0's memory to device 1's", detail);
    (void)cudaGetLastError();

    {  // 80 MiB, more than gpool relays at once (64 MiB): each row's first word says its row
      constexpr size_t kBigPitch = 4096, kBigRows = 20480;
      unsigned *b0 = nullptr, *b1 = nullptr;
      std::vector<unsigned> rows(kBigPitch / sizeof(unsigned) * kBigRows, 0);
      for (size_t y = 0; y < kBigRows; ++y) rows[y * kBigPitch / sizeof(unsigned)] = static_cast<unsigned>(y * 3 + 1);
      CK(cudaSetDevice(0));
      CK(cudaMalloc(&b0, kBigPitch * kBigRows));
      CK(cudaMemcpy(b0, rows.data(), kBigPitch * kBigRows, cudaMemcpyHostToDevice));
      CK(cudaSetDevice(1));
      CK(cudaMalloc(&b1, kBigPitch * kBigRows));
      cudaError_t e = cudaMemcpy2D(b1, kBigPitch, b0, kBigPitch, kBigPitch, kBigRows, cudaMemcpyDeviceToDevice);
      std::vector<unsigned> back(rows.size(), 7);
      CK(cudaMemcpy(back.data(), b1, kBigPitch * kBigRows, cudaMemcpyDeviceToHost));
      std::snprintf(detail, sizeof detail, "%s", cudaGetErrorName(e));
      check(e == cudaSuccess && back == rows, "an 80 MiB cudaMemcpy2D from device 0's memory to device 1's", detail);
      (void)cudaGetLastError();
      CK(cudaFree(b1));
      CK(cudaSetDevice(0));
      CK(cudaFree(b0));
      CK(cudaSetDevice(1));
    }

    cudaMemcpy3DParms p{};
    p.srcPtr = make_cudaPitchedPtr(d1, kPitch, kWidth, kRows / 2);
    p.dstPtr = make_cudaPitchedPtr(d0 + kPitch * kRows, kPitch, kWidth, kRows / 2);
    p.extent = make_cudaExtent(kWidth, kRows / 2, 2);
    p.kind = cudaMemcpyDefault;
    CK(cudaSetDevice(0));
    cudaError_t e5 = cudaMemcpy3D(&p);
    std::fill(out.begin(), out.end(), 0);
    CK(cudaMemcpy2D(out.data(), kPitch, d0 + kPitch * kRows, kPitch, kPitch, kRows, cudaMemcpyDeviceToHost));
    std::snprintf(detail, sizeof detail, "%s", cudaGetErrorName(e5));
    check(e5 == cudaSuccess && rowsMatch(0x11), "cudaMemcpy3D from device 1's memory to device 0's", detail);
    (void)cudaGetLastError();

    // The same two slices back with cudaMemcpy3DPeer (device 0 -> device 1, each end naming its device),
    // then device 1 -> device 0 again with cudaMemcpy3DPeerAsync on device 0's stream.
    cudaMemcpy3DPeerParms q{};
    q.srcPtr = make_cudaPitchedPtr(d0, kPitch, kWidth, kRows / 2);
    q.srcDevice = 0;
    q.dstPtr = make_cudaPitchedPtr(d1 + kPitch * kRows, kPitch, kWidth, kRows / 2);
    q.dstDevice = 1;
    q.extent = make_cudaExtent(kWidth, kRows / 2, 2);
    CK(cudaSetDevice(1));
    CK(cudaMemset2D(d1 + kPitch * kRows, kPitch, 0x33, kPitch, kRows));
    cudaError_t e6 = cudaMemcpy3DPeer(&q);
    std::fill(out.begin(), out.end(), 0);
    CK(cudaMemcpy2D(out.data(), kPitch, d1 + kPitch * kRows, kPitch, kPitch, kRows, cudaMemcpyDeviceToHost));
    std::snprintf(detail, sizeof detail, "%s", cudaGetErrorName(e6));
    check(e6 == cudaSuccess && rowsMatch(0x33), "cudaMemcpy3DPeer from device 0's memory to device 1's", detail);
    (void)cudaGetLastError();
    std::swap(q.srcPtr, q.dstPtr);
    std::swap(q.srcDevice, q.dstDevice);
    q.dstPtr.ptr = d0 + kPitch * kRows;
    CK(cudaSetDevice(0));
    CK(cudaMemset2D(d0 + kPitch * kRows, kPitch, 0x44, kPitch, kRows));
    cudaError_t e7 = cudaMemcpy3DPeerAsync(&q, stream[0]);
    CK(cudaStreamSynchronize(stream[0]));
    std::fill(out.begin(), out.end(), 0);
    CK(cudaMemcpy2D(out.data(), kPitch, d0 + kPitch * kRows, kPitch, kPitch, kRows, cudaMemcpyDeviceToHost));
    std::snprintf(detail, sizeof detail, "%s", cudaGetErrorName(e7));
    check(e7 == cudaSuccess && rowsMatch(0x44), "cudaMemcpy3DPeerAsync from device 1's memory to device 0's", detail);
    (void)cudaGetLastError();
    CK(cudaFree(d0));
    CK(cudaSetDevice(1));
    CK(cudaFree(d1));
  }

  // A stream memory operation on device 1's stream while device 0 is current goes to device 1.
  {
    using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
    auto write32 = driverEntryPoint<WriteValue32>("cuStreamWriteValue32");
    CK(cudaSetDevice(0));
    CUresult r = write32(reinterpret_cast<CUstream>(stream[1]), reinterpret_cast<CUdeviceptr>(small[1]), 0xfeedu, 0);
    CK(cudaStreamSynchronize(stream[1]));
    unsigned word = 0;
    CK(cudaMemcpy(&word, small[1], sizeof word, cudaMemcpyDeviceToHost));
    std::snprintf(detail, sizeof detail, "CUresult %d, word %#x", static_cast<int>(r), word);
    check(r == CUDA_SUCCESS && word == 0xfeedu, "cuStreamWriteValue32 on device 1's stream while device 0 is current", detail);
  }

  // Host functions on each device's stream, whichever device is current; each device's worker calls back.
  {
    static int ran[2] = {0, 0};
    CK(cudaSetDevice(0));
    CK(cudaLaunchHostFunc(stream[0], [](void*) { ++ran[0]; }, nullptr));
    CK(cudaStreamSynchronize(stream[0]));
    CK(cudaLaunchHostFunc(stream[1], [](void*) { ++ran[1]; }, nullptr));
    CK(cudaStreamSynchronize(stream[1]));
    CK(cudaSetDevice(1));
    CK(cudaLaunchHostFunc(stream[1], [](void*) { ++ran[1]; }, nullptr));
    CK(cudaStreamSynchronize(stream[1]));
    std::snprintf(detail, sizeof detail, "device 0: %d, device 1: %d", ran[0], ran[1]);
    check(ran[0] == 1 && ran[1] == 2, "host functions run on both devices' streams", detail);
  }

  // A graph captured on device 1 is device 1's: queried, launched and destroyed while device 0 is current.
  {
    CK(cudaSetDevice(1));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(stream[1], cudaStreamCaptureModeGlobal));
    gpool_test_increment<<<(kN + 255) / 256, 256, 0, stream[1]>>>(buf[1], kN);
    CK(cudaStreamEndCapture(stream[1], &g));
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaSetDevice(0));
    const unsigned before = fetch(buf[1])[0];
    size_t nodes = 0;
    CK(cudaGraphGetNodes(g, nullptr, &nodes));
    check(nodes == 1, "device 1's graph is queried while device 0 is current");
    CK(cudaGraphLaunch(exec, stream[1]));
    CK(cudaStreamSynchronize(stream[1]));
    check(fetch(buf[1])[0] == before + 1, "and launched on device 1's stream");
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(g));
  }

  // A green context of device 1's SMs, made while device 0 is current: its stream is device 1's and runs
  // device 1's kernel; made current (device 0's context below it), the runtime's device is 1 and its default
  // stream the green context's. Device 0's SMs are not device 1's.
  {
    auto resourceOf = driverEntryPoint<decltype(&cuDeviceGetDevResource)>("cuDeviceGetDevResource", 12040);
    auto describe = driverEntryPoint<decltype(&cuDevResourceGenerateDesc)>("cuDevResourceGenerateDesc", 12040);
    auto create = driverEntryPoint<decltype(&cuGreenCtxCreate)>("cuGreenCtxCreate", 12040);
    auto destroy = driverEntryPoint<decltype(&cuGreenCtxDestroy)>("cuGreenCtxDestroy", 12040);
    auto streamOf = driverEntryPoint<decltype(&cuGreenCtxStreamCreate)>("cuGreenCtxStreamCreate", 12050);
    auto toContext = driverEntryPoint<decltype(&cuCtxFromGreenCtx)>("cuCtxFromGreenCtx", 12040);
    auto push = driverEntryPoint<decltype(&cuCtxPushCurrent)>("cuCtxPushCurrent", 4000);
    auto pop = driverEntryPoint<decltype(&cuCtxPopCurrent)>("cuCtxPopCurrent", 4000);
    CK(cudaSetDevice(0));
    CUdevResource sms[2];
    CUdevResourceDesc desc[2];
    for (int d = 0; d < 2; ++d) {
      check(resourceOf(d, &sms[d], CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS && describe(&desc[d], &sms[d], 1) == CUDA_SUCCESS,
            "each device's SMs in a descriptor");
    }
    CUgreenCtx green = nullptr, wrong = nullptr;
    check(create(&wrong, desc[0], 1, CU_GREEN_CTX_DEFAULT_STREAM) != CUDA_SUCCESS, "device 0's SMs make no green context on device 1");
    check(create(&green, desc[1], 1, CU_GREEN_CTX_DEFAULT_STREAM) == CUDA_SUCCESS, "a green context on device 1, device 0 current");
    CUstream gs = nullptr;
    check(streamOf(&gs, green, CU_STREAM_NON_BLOCKING, 0) == CUDA_SUCCESS, "a stream of it");
    int on = -1;
    CK(cudaStreamGetDevice(gs, &on));
    const unsigned before = fetch(buf[1])[0];
    CK(cudaSetDevice(1));  // (a kernel is launched on a stream of the current device)
    gpool_test_increment<<<(kN + 255) / 256, 256, 0, gs>>>(buf[1], kN);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(gs));
    CK(cudaSetDevice(0));
    std::snprintf(detail, sizeof detail, "device %d", on);
    check(on == 1, "its stream is device 1's", detail);
    const unsigned after = fetch(buf[1])[0];
    std::snprintf(detail, sizeof detail, "%u, was %u", after, before);
    check(after == before + 1, "and runs device 1's kernel", detail);
    CUcontext gc = nullptr;
    check(toContext(&gc, green) == CUDA_SUCCESS && push(gc) == CUDA_SUCCESS, "its context made current");
    int current = -1;
    CK(cudaGetDevice(&current));
    gpool_test_increment<<<(kN + 255) / 256, 256>>>(buf[1], kN);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(0));
    CUcontext popped = nullptr;
    check(pop(&popped) == CUDA_SUCCESS && popped == gc, "and popped");
    std::snprintf(detail, sizeof detail, "device %d", current);
    check(current == 1, "while current, the runtime's device is 1", detail);
    std::snprintf(detail, sizeof detail, "%u, was %u", fetch(buf[1])[0], before);
    check(fetch(buf[1])[0] == before + 2, "and its default stream runs device 1's kernel", detail);
    CK(cudaStreamDestroy(gs));
    check(destroy(green) == CUDA_SUCCESS, "the green context destroyed");
  }

  // Virtual memory management names its device in the allocation's properties, not by the current one: a
  // reservation is the whole process's, physical memory is made on the device prop.location names, mapped
  // anywhere in a reservation made while another device was current, reached by that device's kernels and
  // copies, and let go of with either device current. No device reaches another's memory (no peer access),
  // and two reservations never overlap.
  {
    auto granularityOf = driverEntryPoint<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
    auto reserve = driverEntryPoint<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
    auto unreserve = driverEntryPoint<decltype(&cuMemAddressFree)>("cuMemAddressFree");
    auto create = driverEntryPoint<decltype(&cuMemCreate)>("cuMemCreate");
    auto release = driverEntryPoint<decltype(&cuMemRelease)>("cuMemRelease");
    auto map = driverEntryPoint<decltype(&cuMemMap)>("cuMemMap");
    auto unmap = driverEntryPoint<decltype(&cuMemUnmap)>("cuMemUnmap");
    auto setAccess = driverEntryPoint<decltype(&cuMemSetAccess)>("cuMemSetAccess");
    auto getAccess = driverEntryPoint<decltype(&cuMemGetAccess)>("cuMemGetAccess");
    CUmemAllocationProp prop[2]{};
    for (int d = 0; d < 2; ++d) {
      prop[d].type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop[d].location = {CU_MEM_LOCATION_TYPE_DEVICE, d};
    }
    size_t gran = 0;
    CK(cudaSetDevice(0));
    check(granularityOf(&gran, &prop[1], CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && gran > 0,
          "device 1's allocation granularity, device 0 current");
    size_t free_before[2], free_after[2], total = 0;
    for (int d = 0; d < 2; ++d) {
      CK(cudaSetDevice(d));
      CK(cudaMemGetInfo(&free_before[d], &total));
    }
    CK(cudaSetDevice(0));
    CUmemGenericAllocationHandle h1 = 0, h0 = 0;
    CUresult made = create(&h1, 4 * gran, &prop[1], 0);
    for (int d = 0; d < 2; ++d) {
      CK(cudaSetDevice(d));
      CK(cudaMemGetInfo(&free_after[d], &total));
    }
    std::snprintf(detail, sizeof detail, "cuMemCreate %d; free on device 0 %zu -> %zu, on device 1 %zu -> %zu", made,
                  free_before[0], free_after[0], free_before[1], free_after[1]);
    check(made == CUDA_SUCCESS && free_after[1] + 4 * gran <= free_before[1], "cuMemCreate for device 1, device 0 current",
          detail);

    // Reservations made with either device current never overlap, even where the second asks for the
    // first's addresses (which device 1's worker has free).
    CUdeviceptr va = 0, other = 0;
    CK(cudaSetDevice(0));
    CUresult r0 = reserve(&va, 8 * gran, 0, 0, 0);
    CK(cudaSetDevice(1));
    CUresult r1 = reserve(&other, 8 * gran, 0, va, 0);
    std::snprintf(detail, sizeof detail, "%d at %#llx, %d at %#llx", r0, (unsigned long long)va, r1, (unsigned long long)other);
    check(r0 == CUDA_SUCCESS && r1 == CUDA_SUCCESS && (va + 8 * gran <= other || other + 8 * gran <= va),
          "two reservations, one per current device, do not overlap", detail);

    // Device 1's memory mapped into the reservation made while device 0 was current, device 0 current.
    CK(cudaSetDevice(0));
    CUmemAccessDesc rw1{{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUmemAccessDesc rw0{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUresult mapped = map(va, 4 * gran, 0, h1, 0);
    CUresult access = setAccess(va, 4 * gran, &rw1, 1);
    CUresult peer = setAccess(va, 4 * gran, &rw0, 1);
    std::snprintf(detail, sizeof detail, "cuMemMap %d, access for device 1 %d, for device 0 %d", mapped, access, peer);
    check(mapped == CUDA_SUCCESS && access == CUDA_SUCCESS && peer == CUDA_ERROR_INVALID_DEVICE,
          "device 1's memory mapped where device 0 reserved, device 0 current; only device 1 reaches it", detail);
    unsigned long long flags[2] = {99, 99};
    CUmemLocation on0{CU_MEM_LOCATION_TYPE_DEVICE, 0}, on1{CU_MEM_LOCATION_TYPE_DEVICE, 1};
    getAccess(&flags[0], &on0, va);
    getAccess(&flags[1], &on1, va);
    std::snprintf(detail, sizeof detail, "device 0 %llu, device 1 %llu", flags[0], flags[1]);
    check(flags[0] == CU_MEM_ACCESS_FLAGS_PROT_NONE && flags[1] == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          "cuMemGetAccess tells each device's access", detail);
    cudaPointerAttributes where{};
    CK(cudaPointerGetAttributes(&where, reinterpret_cast<void*>(va)));
    auto* mem = reinterpret_cast<unsigned*>(va);
    CK(cudaMemcpy(mem, words, sizeof words, cudaMemcpyHostToDevice));
    CK(cudaSetDevice(1));
    gpool_test_increment<<<1, 256, 0, stream[1]>>>(mem, 256);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(stream[1]));
    CK(cudaSetDevice(0));
    std::memset(back, 0, sizeof back);
    CK(cudaMemcpy(back, mem, sizeof back, cudaMemcpyDeviceToHost));
    bool incremented = true;
    for (int i = 0; i < 256; ++i) incremented = incremented && back[i] == words[i] + 1;
    CK(cudaMemcpy(small[0], mem, sizeof words, cudaMemcpyDefault));
    unsigned again[256]{};
    CK(cudaMemcpy(again, small[0], sizeof again, cudaMemcpyDeviceToHost));
    std::snprintf(detail, sizeof detail, "pointer's device %d", where.device);
    check(where.type == cudaMemoryTypeDevice && where.device == 1 && incremented && std::memcmp(back, again, sizeof back) == 0,
          "device 1's kernel and copies (to the host, to device 0) reach it", detail);

    // Device 0's memory in the same reservation, past device 1's: each part is its device's.
    CK(cudaSetDevice(1));
    CUresult made0 = create(&h0, 4 * gran, &prop[0], 0);
    CUresult mapped0 = map(va + 4 * gran, 4 * gran, 0, h0, 0);
    CUresult access0 = setAccess(va + 4 * gran, 4 * gran, &rw0, 1);
    cudaPointerAttributes second{};
    CK(cudaPointerGetAttributes(&second, reinterpret_cast<void*>(va + 4 * gran)));
    CK(cudaMemcpy(reinterpret_cast<void*>(va + 4 * gran), mem, sizeof words, cudaMemcpyDefault));
    std::memset(back, 0, sizeof back);
    CK(cudaMemcpy(back, reinterpret_cast<void*>(va + 4 * gran), sizeof back, cudaMemcpyDeviceToHost));
    std::snprintf(detail, sizeof detail, "create %d, map %d, access %d, pointer's device %d", made0, mapped0, access0, second.device);
    check(made0 == CUDA_SUCCESS && mapped0 == CUDA_SUCCESS && access0 == CUDA_SUCCESS && second.device == 0 &&
              std::memcmp(back, again, sizeof back) == 0,
          "device 0's memory in the same reservation, device 1 current, copied from device 1's part", detail);

    // One copy across both devices' parts (contiguous addresses, two workers) is refused whole: neither
    // part is written.
    {
      std::vector<unsigned> span(512, 7u), before(512), got(512);
      auto* mid = reinterpret_cast<unsigned*>(va + 4 * gran) - 256;
      CK(cudaMemcpy(before.data(), mid, 1024, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(before.data() + 256, mid + 256, 1024, cudaMemcpyDeviceToHost));
      cudaError_t across = cudaMemcpy(mid, span.data(), 2048, cudaMemcpyHostToDevice);
      (void)cudaGetLastError();
      CK(cudaMemcpy(got.data(), mid, 1024, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(got.data() + 256, mid + 256, 1024, cudaMemcpyDeviceToHost));
      std::snprintf(detail, sizeof detail, "%s", cudaGetErrorName(across));
      check(across != cudaSuccess && got == before, "a copy across device 1's and device 0's parts is refused, neither written",
            detail);
    }
    // Let go of with the other device current: unmapped (both parts at once), released, unreserved.
    CK(cudaSetDevice(1));
    CUresult unmapped = unmap(va, 8 * gran);
    CUresult released1 = release(h1);
    CK(cudaSetDevice(0));
    CUresult released0 = release(h0);
    CUresult freed = unreserve(va, 8 * gran);
    CUresult freed_other = unreserve(other, 8 * gran);
    CK(cudaSetDevice(1));
    CK(cudaMemGetInfo(&free_after[1], &total));
    std::snprintf(detail, sizeof detail, "unmap %d, release %d %d, free %d %d; device 1's free memory %zu of %zu before",
                  unmapped, released1, released0, freed, freed_other, free_after[1], free_before[1]);
    check(unmapped == CUDA_SUCCESS && released1 == CUDA_SUCCESS && released0 == CUDA_SUCCESS && freed == CUDA_SUCCESS &&
              freed_other == CUDA_SUCCESS && free_after[1] == free_before[1],
          "unmapped, released and unreserved with the other device current; device 1's memory is back", detail);
  }

  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaFree(buf[d]));
    CK(cudaFree(copy[d]));
    CK(cudaFree(small[d]));
    CK(cudaStreamDestroy(stream[d]));
    CK(cudaDeviceSynchronize());
  }
  CK(cudaEventDestroy(done));
  if (failures == 0) std::printf("ALL PASSED\n");
  return failures ? 1 : 0;
}
