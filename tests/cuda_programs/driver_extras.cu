// Driver functions beyond the basics that the runtime, cuDNN, cuBLAS and NCCL import, or older programs
// call: a context's events (cuCtxRecordEvent/cuCtxWaitEvent), the persisting L2 reset, the context's SM
// affinity, a device by PCI address, the deprecated device properties, a kernel's library and its module,
// a pointer's SYNC_MEMOPS attribute, and the deprecated launch API (cuParamSet*,
// cuFuncSetBlockShape, cuLaunchGrid); and occupancy answers as the function's attributes change.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "checks.h"
#include "increment.cuh"

namespace {

constexpr int kN = 512;

bool allEqual(const unsigned* d, unsigned want) {
  std::vector<unsigned> h(kN);
  CK(cudaMemcpy(h.data(), d, kN * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (unsigned v : h)
    if (v != want) return false;
  return true;
}

void contextFunctions(unsigned* d) {
  auto record = driverEntryPoint<CUresult (*)(CUcontext, CUevent)>("cuCtxRecordEvent", 12050);
  auto wait = driverEntryPoint<CUresult (*)(CUcontext, CUevent)>("cuCtxWaitEvent", 12050);
  auto resetL2 = driverEntryPoint<CUresult (*)()>("cuCtxResetPersistingL2Cache", 11000);
  auto affinity = driverEntryPoint<CUresult (*)(CUexecAffinityParam*, CUexecAffinityType)>("cuCtxGetExecAffinity", 11040);
  cudaEvent_t e;
  CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  auto current = driverEntryPoint<CUresult (*)(CUcontext*)>("cuCtxGetCurrent", 4000);
  CUcontext ctx = nullptr;
  check(current(&ctx) == CUDA_SUCCESS && ctx, "the runtime's context is current");
  gpool_test_increment<<<kN / 256, 256>>>(d, kN);
  check(record(nullptr, reinterpret_cast<CUevent>(e)) != CUDA_SUCCESS, "cuCtxRecordEvent needs its context named (NULL is refused)");
  check(record(ctx, reinterpret_cast<CUevent>(e)) == CUDA_SUCCESS, "cuCtxRecordEvent records after the context's work");
  CK(cudaEventSynchronize(e));
  check(allEqual(d, 1), "once the event has happened, the work before it has too");
  check(wait(nullptr, reinterpret_cast<CUevent>(e)) != CUDA_SUCCESS, "so does cuCtxWaitEvent");
  check(wait(ctx, reinterpret_cast<CUevent>(e)) == CUDA_SUCCESS, "cuCtxWaitEvent makes the context's later work wait on it");
  check(resetL2() == CUDA_SUCCESS, "cuCtxResetPersistingL2Cache");
  int flush = 0;
  CK(cudaDeviceGetAttribute(&flush, cudaDevAttrGPUDirectRDMAFlushWritesOptions, 0));
  if (flush & cudaFlushGPUDirectRDMAWritesOptionHost)  // where the device says it takes the flush
    check(cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice, cudaFlushGPUDirectRDMAWritesToOwner) ==
              cudaSuccess,
          "cudaDeviceFlushGPUDirectRDMAWrites");
  CUexecAffinityParam p{};
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  check(affinity(&p, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS && p.param.smCount.val == static_cast<unsigned>(sms),
        "cuCtxGetExecAffinity: the context may use the device's SMs");
  CK(cudaEventDestroy(e));
}

void deviceFunctions() {
  auto byBusId = driverEntryPoint<CUresult (*)(CUdevice*, const char*)>("cuDeviceGetByPCIBusId", 4010);
  auto properties = driverEntryPoint<CUresult (*)(CUdevprop*, CUdevice)>("cuDeviceGetProperties", 2000);
  char id[32];
  CK(cudaDeviceGetPCIBusId(id, sizeof id, 0));
  CUdevice dev = -1;
  unsigned domain = 0, bus = 0, slot = 0;
  int end = 0;
  check(std::sscanf(id, "%4x:%2x:%2x.0%n", &domain, &bus, &slot, &end) == 3 && end == 12 && std::strlen(id) == 12,
        "the address reads as NVIDIA's driver writes it (dddd:bb:ss.0)", id);
  check(byBusId(&dev, id) == CUDA_SUCCESS && dev == 0, "cuDeviceGetByPCIBusId finds the device by its own address", id);
  int runtime_dev = -1;
  check(cudaDeviceGetByPCIBusId(&runtime_dev, id) == cudaSuccess && runtime_dev == 0, "so does cudaDeviceGetByPCIBusId");
  check(byBusId(&dev, "ffff:ff:1f.0") != CUDA_SUCCESS, "an address no device has is no device");
  check(byBusId(&dev, "not an address") != CUDA_SUCCESS, "a string that is no address is refused");
  CUdevprop p{};
  int threads = 0;
  CK(cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerBlock, 0));
  check(properties(&p, 0) == CUDA_SUCCESS && p.maxThreadsPerBlock == threads && p.SIMDWidth == 32,
        "cuDeviceGetProperties answers as the device's attributes");
}

void ownersAndPointers(unsigned* d) {
  auto kernelLibrary = driverEntryPoint<CUresult (*)(CUlibrary*, CUkernel)>("cuKernelGetLibrary", 12050);
  auto getKernel = driverEntryPoint<CUresult (*)(CUkernel*, CUlibrary, const char*)>("cuLibraryGetKernel", 12000);
  auto setAttribute = driverEntryPoint<CUresult (*)(const void*, CUpointer_attribute, CUdeviceptr)>("cuPointerSetAttribute", 6000);
  auto getAttribute = driverEntryPoint<CUresult (*)(void*, CUpointer_attribute, CUdeviceptr)>("cuPointerGetAttribute", 4000);

  // The runtime loads this program's kernels as a library: the kernel's library holds it, by name.
  cudaKernel_t kernel = nullptr;
  CK(cudaGetKernel(&kernel, gpool_test_increment));
  CUlibrary library = nullptr;
  CUkernel again = nullptr;
  check(kernelLibrary(&library, reinterpret_cast<CUkernel>(kernel)) == CUDA_SUCCESS && library &&
            getKernel(&again, library, "gpool_test_increment") == CUDA_SUCCESS && again == reinterpret_cast<CUkernel>(kernel),
        "cuKernelGetLibrary: the library that holds the kernel");

  // The library's module: its function runs, and knows its module.
  auto libraryModule = driverEntryPoint<CUresult (*)(CUmodule*, CUlibrary)>("cuLibraryGetModule", 12000);
  auto moduleFunction = driverEntryPoint<CUresult (*)(CUfunction*, CUmodule, const char*)>("cuModuleGetFunction", 2000);
  auto funcModule = driverEntryPoint<CUresult (*)(CUmodule*, CUfunction)>("cuFuncGetModule", 11000);
  auto launch = driverEntryPoint<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                              CUstream, void**, void**)>("cuLaunchKernel", 4000);
  CUmodule module = nullptr, owner = nullptr;
  CUfunction f = nullptr;
  check(libraryModule(&module, library) == CUDA_SUCCESS && module && moduleFunction(&f, module, "gpool_test_increment") == CUDA_SUCCESS,
        "cuLibraryGetModule: the library's module, whose functions can be got");
  check(funcModule(&owner, f) == CUDA_SUCCESS && owner == module, "cuFuncGetModule: a function's module");
  auto unified = driverEntryPoint<CUresult (*)(void**, CUlibrary, const char*)>("cuLibraryGetUnifiedFunction", 12000);
  void* fptr = nullptr;
  check(unified(&fptr, library, "gpool_test_increment") == CUDA_ERROR_NOT_FOUND && unified(&fptr, library, "none") == CUDA_ERROR_NOT_FOUND,
        "cuLibraryGetUnifiedFunction: a kernel is no unified function, nor is a name the library lacks");
  check(unified(nullptr, library, "none") == CUDA_ERROR_INVALID_VALUE && unified(&fptr, library, nullptr) == CUDA_ERROR_INVALID_VALUE,
        "and it needs somewhere to write and a name");
  CK(cudaMemset(d, 0, kN * sizeof(unsigned)));
  int n = kN;
  void* args[] = {&d, &n};
  check(launch(f, kN / 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr) == CUDA_SUCCESS, "the module's function launches");
  CK(cudaDeviceSynchronize());
  check(allEqual(d, 1), "and runs");

  int on = 0, read = -1;
  check(setAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, reinterpret_cast<CUdeviceptr>(d)) == CUDA_SUCCESS &&
            getAttribute(&read, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, reinterpret_cast<CUdeviceptr>(d)) == CUDA_SUCCESS && read == 0,
        "cuPointerSetAttribute sets SYNC_MEMOPS, which reads back");
  on = 1;
  check(setAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, reinterpret_cast<CUdeviceptr>(d + 1)) == CUDA_SUCCESS &&
            getAttribute(&read, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, reinterpret_cast<CUdeviceptr>(d)) == CUDA_SUCCESS && read == 1,
        "an interior pointer sets its allocation's");
  check(setAttribute(&on, CU_POINTER_ATTRIBUTE_MAPPED, reinterpret_cast<CUdeviceptr>(d)) != CUDA_SUCCESS,
        "no other attribute can be set");
}

// The deprecated launch API: the kernel's arguments written at their offsets, its block shape set, and a
// 2 x 1 grid launched.
void legacyLaunch(unsigned* d) {
  auto blockShape = driverEntryPoint<CUresult (*)(CUfunction, int, int, int)>("cuFuncSetBlockShape", 2000);
  auto paramSize = driverEntryPoint<CUresult (*)(CUfunction, unsigned)>("cuParamSetSize", 2000);
  auto paramV = driverEntryPoint<CUresult (*)(CUfunction, int, void*, unsigned)>("cuParamSetv", 2000);
  auto paramI = driverEntryPoint<CUresult (*)(CUfunction, int, unsigned)>("cuParamSeti", 2000);
  auto launchGrid = driverEntryPoint<CUresult (*)(CUfunction, int, int)>("cuLaunchGrid", 2000);
  auto launchGridAsync = driverEntryPoint<CUresult (*)(CUfunction, int, int, CUstream)>("cuLaunchGridAsync", 2000);
  CUfunction f = nullptr;
  CK(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(gpool_test_increment)));
  check(blockShape(f, 256, 1, 1) == CUDA_SUCCESS, "cuFuncSetBlockShape");
  check(paramV(f, 0, &d, sizeof d) == CUDA_SUCCESS && paramI(f, 8, kN) == CUDA_SUCCESS && paramSize(f, 12) == CUDA_SUCCESS,
        "cuParamSetv, cuParamSeti, cuParamSetSize");
  CK(cudaMemset(d, 0, kN * sizeof(unsigned)));
  check(launchGrid(f, kN / 256, 1) == CUDA_SUCCESS, "cuLaunchGrid launches");
  CK(cudaDeviceSynchronize());
  check(allEqual(d, 1), "with the arguments and shape set");
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  check(launchGridAsync(f, kN / 256, 1, reinterpret_cast<CUstream>(s)) == CUDA_SUCCESS, "cuLaunchGridAsync launches on a stream");
  CK(cudaStreamSynchronize(s));
  check(allEqual(d, 2), "and runs there");
  CK(cudaStreamDestroy(s));
}

// Occupancy answers stay right as the function's attributes change (gpool keeps them between questions).
void occupancy() {
  int plain = 0, big = 0, again = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&plain, gpool_test_increment, 128, 0));
  check(plain > 0, "blocks of 128 threads fit on an SM");
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&big, gpool_test_increment, 128, 64 << 10));
  check(big == 0, "none fits with 64 KiB of dynamic shared memory before the function allows that much");
  CK(cudaFuncSetAttribute(gpool_test_increment, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&big, gpool_test_increment, 128, 64 << 10));
  check(big > 0 && big < plain, "once it does, some fit (fewer than without)");
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&again, gpool_test_increment, 128, 0));
  check(again == plain, "asked again, the same answer");
  CK(cudaFuncSetAttribute(gpool_test_increment, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 << 10));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&big, gpool_test_increment, 128, 64 << 10));
  check(big == 0, "and none again once the function allows less");
}

// A library's kernel (CUkernel) and the function got from it in this context (CUfunction) are one object
// to the driver: an attribute set through either reads back, and counts for occupancy, through the other
// (gpool keeps attributes and occupancy answers between calls).
void kernelAndItsFunction() {
  using GetKernelAttribute = CUresult (*)(int*, CUfunction_attribute, CUkernel, CUdevice);
  using SetKernelAttribute = CUresult (*)(CUfunction_attribute, int, CUkernel, CUdevice);
  using GetFuncAttribute = CUresult (*)(int*, CUfunction_attribute, CUfunction);
  using SetFuncAttribute = CUresult (*)(CUfunction, CUfunction_attribute, int);
  using Occupancy = CUresult (*)(int*, CUfunction, int, size_t);
  auto getKernel = driverEntryPoint<GetKernelAttribute>("cuKernelGetAttribute");
  auto setKernel = driverEntryPoint<SetKernelAttribute>("cuKernelSetAttribute");
  auto getFunc = driverEntryPoint<GetFuncAttribute>("cuFuncGetAttribute");
  auto setFunc = driverEntryPoint<SetFuncAttribute>("cuFuncSetAttribute");
  auto occupancy = driverEntryPoint<Occupancy>("cuOccupancyMaxActiveBlocksPerMultiprocessor");
  auto getFunction = driverEntryPoint<CUresult (*)(CUfunction*, CUkernel)>("cuKernelGetFunction");
  cudaKernel_t k = nullptr;
  CK(cudaGetKernel(&k, gpool_test_increment));
  auto kernel = reinterpret_cast<CUkernel>(k);
  CUfunction f = nullptr;
  check(getFunction(&f, kernel) == CUDA_SUCCESS && f != nullptr, "cuKernelGetFunction gives the kernel's function here");
  cudaFunction_t runtimes = nullptr;
  CK(cudaGetFuncBySymbol(&runtimes, reinterpret_cast<const void*>(gpool_test_increment)));
  check(reinterpret_cast<CUfunction>(runtimes) == f, "and the runtime's (cudaGetFuncBySymbol) is the same one");
  const auto most = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  // Reads the attribute and the blocks that fit with 64 KiB of dynamic shared memory through both handles.
  auto agree = [&](int want, bool fits, const char* what) {
    int on_kernel = -1, on_function = -1, fit_kernel = -1, fit_function = -1;
    getKernel(&on_kernel, most, kernel, 0);
    getFunc(&on_function, most, f);
    occupancy(&fit_kernel, reinterpret_cast<CUfunction>(kernel), 128, 64 << 10);
    occupancy(&fit_function, f, 128, 64 << 10);
    char detail[160];
    std::snprintf(detail, sizeof detail, "attribute: kernel %d, function %d; blocks: kernel %d, function %d", on_kernel,
                  on_function, fit_kernel, fit_function);
    check(on_kernel == want && on_function == want && (fit_kernel > 0) == fits && (fit_function > 0) == fits, what, detail);
  };
  agree(48 << 10, false, "kernel and function agree before either is set");
  check(setKernel(most, 64 << 10, kernel, 0) == CUDA_SUCCESS, "cuKernelSetAttribute");
  agree(64 << 10, true, "set through the kernel: read and used through both");
  check(setFunc(f, most, 40 << 10) == CUDA_SUCCESS, "cuFuncSetAttribute");
  agree(40 << 10, false, "set through the function: read and used through both");
  setFunc(f, most, 48 << 10);  // (as it was, for what follows)
}

// The block size with the most resident threads: the driver's answer (cuOccupancyMaxPotentialBlockSize)
// is the runtime template's; a cluster size; a 1D texture's width; and CUDA 13's pools by location.
void potentialsAndPools() {
  auto potential = driverEntryPoint<CUresult (*)(int*, int*, CUfunction, CUoccupancyB2DSize, size_t, int)>(
      "cuOccupancyMaxPotentialBlockSize", 6050);
  CUfunction f = nullptr;
  CK(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(gpool_test_increment)));
  int grid = 0, block = 0, rt_grid = 0, rt_block = 0;
  check(potential(&grid, &block, f, nullptr, 1024, 0) == CUDA_SUCCESS && block > 0 && block % 32 == 0,
        "cuOccupancyMaxPotentialBlockSize answers a whole number of warps");
  CK(cudaOccupancyMaxPotentialBlockSize(&rt_grid, &rt_block, gpool_test_increment, 1024));
  check(grid == rt_grid && block == rt_block, "the same as the runtime's cudaOccupancyMaxPotentialBlockSize");

  cudaLaunchConfig_t config{};
  config.gridDim = dim3(16);
  config.blockDim = dim3(128);
  int cluster = 0;
  check(cudaOccupancyMaxPotentialClusterSize(&cluster, reinterpret_cast<const void*>(gpool_test_increment), &config) == cudaSuccess &&
            cluster >= 1,
        "cudaOccupancyMaxPotentialClusterSize");
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float4>();
  size_t width = 0;
  check(cudaDeviceGetTexture1DLinearMaxWidth(&width, &desc, 0) == cudaSuccess && width > 0, "cudaDeviceGetTexture1DLinearMaxWidth");

  cudaMemLocation here{cudaMemLocationTypeDevice, 0};
  cudaMemPool_t default_pool = nullptr, by_location = nullptr, current = nullptr, made = nullptr;
  CK(cudaDeviceGetDefaultMemPool(&default_pool, 0));
  check(cudaMemGetDefaultMemPool(&by_location, &here, cudaMemAllocationTypePinned) == cudaSuccess && by_location == default_pool,
        "cudaMemGetDefaultMemPool: the device's default pool");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location = here;
  CK(cudaMemPoolCreate(&made, &props));
  check(cudaMemSetMemPool(&here, cudaMemAllocationTypePinned, made) == cudaSuccess &&
            cudaMemGetMemPool(&current, &here, cudaMemAllocationTypePinned) == cudaSuccess && current == made,
        "cudaMemSetMemPool sets the device's current pool, which cudaMemGetMemPool reads");
  CK(cudaMemSetMemPool(&here, cudaMemAllocationTypePinned, default_pool));
  CK(cudaMemPoolDestroy(made));
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  unsigned* d = nullptr;
  CK(cudaMalloc(&d, kN * sizeof(unsigned)));
  CK(cudaMemset(d, 0, kN * sizeof(unsigned)));
  contextFunctions(d);
  deviceFunctions();
  ownersAndPointers(d);
  legacyLaunch(d);
  occupancy();
  kernelAndItsFunction();
  potentialsAndPools();
  CK(cudaFree(d));
  if (failures == 0) std::printf("ALL PASSED\n");
  return failures == 0 ? 0 : 1;
}
