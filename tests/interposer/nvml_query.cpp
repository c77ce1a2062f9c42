// NVML through gpool's libnvidia-ml.so.1, checked against the CUDA driver API through gpool's libcuda:
// the same devices, names and memory, and an allocation shows in NVML's "used". Run by
// run_through_gpool.sh (sim in CI); prints what nvidia-smi's basic query would show.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

struct Memory {
  unsigned long long total, free, used;
};
struct Utilization {
  unsigned gpu, memory;
};

static int failures = 0;
static void check(bool ok, const char* what) {
  std::printf("%s  %s\n", ok ? "PASS" : "FAIL", what);
  if (!ok) ++failures;
}

template <typename F>
static F sym(void* lib, const char* name) {
  auto f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) {
    std::printf("FAIL  %s is not exported\n", name);
    ++failures;
  }
  return f;
}

int main() {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!nvml || !cuda) {
    std::printf("FAIL  cannot load the libraries: %s\n", dlerror());
    return 1;
  }
  auto init = sym<int (*)()>(nvml, "nvmlInit_v2");
  auto count = sym<int (*)(unsigned*)>(nvml, "nvmlDeviceGetCount_v2");
  auto handle = sym<int (*)(unsigned, void**)>(nvml, "nvmlDeviceGetHandleByIndex_v2");
  auto by_uuid = sym<int (*)(const char*, void**)>(nvml, "nvmlDeviceGetHandleByUUID");
  auto name = sym<int (*)(void*, char*, unsigned)>(nvml, "nvmlDeviceGetName");
  auto uuid = sym<int (*)(void*, char*, unsigned)>(nvml, "nvmlDeviceGetUUID");
  auto memory = sym<int (*)(void*, Memory*)>(nvml, "nvmlDeviceGetMemoryInfo");
  auto util = sym<int (*)(void*, Utilization*)>(nvml, "nvmlDeviceGetUtilizationRates");
  auto driver = sym<int (*)(char*, unsigned)>(nvml, "nvmlSystemGetDriverVersion");
  auto shutdown = sym<int (*)()>(nvml, "nvmlShutdown");
  auto err = sym<const char* (*)(int)>(nvml, "nvmlErrorString");
  if (failures) return 1;

  unsigned n = 0;
  check(count(&n) == 1 /*UNINITIALIZED*/, "queries before nvmlInit answer NVML_ERROR_UNINITIALIZED");
  int r = init();
  if (r != 0) {
    std::printf("FAIL  nvmlInit_v2: %s\n", err(r));
    return 1;
  }
  check(count(&n) == 0 && n >= 1, "nvmlDeviceGetCount_v2 reports the remote device");
  void* dev = nullptr;
  check(handle(0, &dev) == 0 && dev, "nvmlDeviceGetHandleByIndex_v2(0)");
  check(handle(n, &dev) == 2 /*INVALID_ARGUMENT*/, "an index past the count is refused");
  handle(0, &dev);
  char nm[96] = {}, id[96] = {}, drv[96] = {};
  check(name(dev, nm, sizeof nm) == 0, "nvmlDeviceGetName");
  check(name(dev, nm, 4) == 7 /*INSUFFICIENT_SIZE*/, "a short name buffer is refused");
  name(dev, nm, sizeof nm);
  check(uuid(dev, id, sizeof id) == 0 && std::strncmp(id, "GPU-", 4) == 0, "nvmlDeviceGetUUID in NVML's GPU-... form");
  void* again = nullptr;
  check(by_uuid(id, &again) == 0 && again == dev, "nvmlDeviceGetHandleByUUID finds the same device");
  check(driver(drv, sizeof drv) == 0 && drv[0], "nvmlSystemGetDriverVersion");

  auto cuInit_ = sym<decltype(&cuInit)>(cuda, "cuInit");
  auto cuName = sym<decltype(&cuDeviceGetName)>(cuda, "cuDeviceGetName");
  auto cuTotal = sym<decltype(&cuDeviceTotalMem_v2)>(cuda, "cuDeviceTotalMem_v2");
  auto cuRetain = sym<decltype(&cuDevicePrimaryCtxRetain)>(cuda, "cuDevicePrimaryCtxRetain");
  auto cuSetCurrent = sym<decltype(&cuCtxSetCurrent)>(cuda, "cuCtxSetCurrent");
  auto cuAlloc = sym<decltype(&cuMemAlloc_v2)>(cuda, "cuMemAlloc_v2");
  auto cuFree = sym<decltype(&cuMemFree_v2)>(cuda, "cuMemFree_v2");
  if (failures) return 1;
  cuInit_(0);
  char cu_name[96] = {};
  size_t total = 0;
  cuName(cu_name, sizeof cu_name, 0);
  cuTotal(&total, 0);
  check(std::strcmp(cu_name, nm) == 0, "NVML and CUDA name the same device");
  Memory before{}, after{};
  check(memory(dev, &before) == 0 && before.total == total && before.used + before.free == before.total,
        "nvmlDeviceGetMemoryInfo: total as CUDA reports it, used + free = total");
  CUcontext ctx;
  cuRetain(&ctx, 0);
  cuSetCurrent(ctx);
  CUdeviceptr p = 0;
  const size_t gib = size_t{1} << 30;
  check(cuAlloc(&p, gib) == CUDA_SUCCESS, "cuMemAlloc of 1 GiB");
  memory(dev, &after);
  check(after.used >= before.used + gib, "the allocation shows in NVML's used memory");
  cuFree(p);
  Utilization u{101, 101};
  check(util(dev, &u) == 0 && u.gpu <= 100 && u.memory <= 100, "nvmlDeviceGetUtilizationRates");
  std::printf("name, uuid, memory.used [MiB], memory.total [MiB], utilization.gpu [%%], driver\n");
  std::printf("%s, %s, %llu, %llu, %u, %s\n", nm, id, after.used >> 20, after.total >> 20, u.gpu, drv);
  check(shutdown() == 0, "nvmlShutdown");
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "ALL PASSED", failures);
  return failures ? 1 : 0;
}
