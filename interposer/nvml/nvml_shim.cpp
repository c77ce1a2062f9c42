// gpool's libnvidia-ml.so.1: NVML queries on a client machine report the remote GPU(s) gpool serves.
// It answers through gpool's libcuda.so.1 (found the same way, first on the library path), which owns
// the connection: names, UUIDs and PCI ids come from the handshake, memory and utilization from the
// worker. Only the subset below is implemented; nvml.h is not part of the CUDA toolkit, so the types
// used are declared here, with NVML's layouts. Anything else is not exported (see docs/user.md).
#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "gpool/protocol/gpu_uuid.h"

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

namespace {

// --- the NVML subset (nvml.h layouts) ---------------------------------------------------------------
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
                       NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
                       NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_UNKNOWN = 999;

struct nvmlDevice_st {
  int ordinal;
};
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlMemory_v2_t {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

// --- gpool's libcuda, found as libcuda.so.1 -----------------------------------------------------------
struct Cuda {
  decltype(&cuInit) init = nullptr;
  decltype(&cuDeviceGetCount) count = nullptr;
  decltype(&cuDeviceGetName) name = nullptr;
  decltype(&cuDeviceGetUuid) uuid = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
  decltype(&cuDeviceTotalMem_v2) total_mem = nullptr;
  decltype(&cuDriverGetVersion) driver_version = nullptr;
  CUresult (*status)(int, unsigned long long*, unsigned long long*, unsigned*, unsigned*, char*, unsigned) = nullptr;
};

std::mutex g_mu;
Cuda g_cuda;
int g_init_count = 0;
nvmlDevice_st g_devices[64];
int g_device_count = 0;

void warn(const char* fmt, ...) {
  std::fprintf(stderr, "gpool-nvml: ");
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
}

nvmlReturn_t fromCu(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return NVML_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: case CUDA_ERROR_INVALID_DEVICE: return NVML_ERROR_INVALID_ARGUMENT;
    case CUDA_ERROR_NO_DEVICE: return NVML_ERROR_DRIVER_NOT_LOADED;
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return NVML_ERROR_GPU_IS_LOST;
    default: return NVML_ERROR_UNKNOWN;
  }
}

nvmlReturn_t load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    warn("cannot load libcuda.so.1 (%s): put gpool's lib directory first on LD_LIBRARY_PATH", dlerror());
    return NVML_ERROR_DRIVER_NOT_LOADED;
  }
  if (!dlsym(lib, "gpool_client_library")) {
    warn("libcuda.so.1 found first is not gpool's client library: put gpool's lib directory first on LD_LIBRARY_PATH");
    return NVML_ERROR_DRIVER_NOT_LOADED;
  }
  Cuda c;
  bool ok = true;
  auto get = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    ok = ok && fn;
  };
  get(c.init, "cuInit");
  get(c.count, "cuDeviceGetCount");
  get(c.name, "cuDeviceGetName");
  get(c.uuid, "cuDeviceGetUuid");
  get(c.attribute, "cuDeviceGetAttribute");
  get(c.total_mem, "cuDeviceTotalMem_v2");
  get(c.driver_version, "cuDriverGetVersion");
  get(c.status, "gpool_nvml_device_status");
  if (!ok) {
    warn("gpool's libcuda.so.1 lacks the entry points this library needs (mismatched gpool versions?)");
    return NVML_ERROR_DRIVER_NOT_LOADED;
  }
  if (CUresult r = c.init(0); r != CUDA_SUCCESS) return fromCu(r);
  int n = 0;
  if (CUresult r = c.count(&n); r != CUDA_SUCCESS) return fromCu(r);
  g_device_count = n > 64 ? 64 : n;
  for (int i = 0; i < g_device_count; ++i) g_devices[i].ordinal = i;
  g_cuda = c;
  return NVML_SUCCESS;
}

bool initialised() {
  std::lock_guard lock(g_mu);
  return g_init_count > 0;
}

nvmlReturn_t device(nvmlDevice_t d, int& ordinal) {
  if (!initialised()) return NVML_ERROR_UNINITIALIZED;
  if (!d || d < g_devices || d >= g_devices + g_device_count) return NVML_ERROR_INVALID_ARGUMENT;
  ordinal = d->ordinal;
  return NVML_SUCCESS;
}

std::string uuidText(const CUuuid& u) { return gpool::proto::gpuUuidText(reinterpret_cast<const uint8_t*>(u.bytes)); }

nvmlReturn_t copyString(const char* s, char* out, unsigned length) {
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s, std::strlen(s) + 1);
  return NVML_SUCCESS;
}

// NCCL cannot run between gpool devices: its kernels reach another GPU's memory (peer access) or host
// memory mapped into the GPU, and each gpool device is a worker process that shares neither with anything.
// Its communicator set-up asks NVML for devices by PCI bus id; asked so from NCCL in a process whose lease
// has several devices, this library says why it cannot work, once, and refuses, so the set-up fails at
// once rather than later or in a kernel. (One device alone, a communicator of one rank, is let through.)
bool severalDevices() {
  const char* shares = std::getenv("GPOOL_SHARES");
  return g_device_count > 1 || (shares && std::strchr(shares, ','));
}

bool refuseNccl(void* caller) {
  if (!severalDevices()) return false;
  Dl_info info{};
  if (!dladdr(caller, &info) || !info.dli_fname) return false;
  bool nccl = std::strstr(info.dli_fname, "libnccl") != nullptr;
  if (!nccl) {  // NCCL linked statically into a framework's library
    void* h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    nccl = h && dlsym(h, "ncclGetVersion");
    if (h) dlclose(h);
  }
  static std::once_flag told;
  if (nccl)
    std::call_once(told, [] {
      warn("NCCL is not supported between gpool devices: NCCL's kernels need peer access between GPUs or host "
           "memory mapped into the GPU, and each gpool device is a separate worker process with neither; communicate "
           "through the host instead (torch.distributed's gloo backend)");
    });
  return nccl;
}

nvmlReturn_t status(nvmlDevice_t d, unsigned long long* free_bytes, unsigned long long* total, unsigned* gpu,
                    unsigned* mem, char* driver, unsigned driver_len) {
  int ordinal = 0;
  if (nvmlReturn_t r = device(d, ordinal); r != NVML_SUCCESS) return r;
  return fromCu(g_cuda.status(ordinal, free_bytes, total, gpu, mem, driver, driver_len));
}

}  // namespace

#define NVML_EXPORT extern "C" __attribute__((visibility("default")))

NVML_EXPORT int gpool_nvml_shim = 1;  // lets a worker notice it loaded this shim instead of NVIDIA's NVML

NVML_EXPORT nvmlReturn_t nvmlInit_v2() {
  std::lock_guard lock(g_mu);
  if (g_init_count > 0) {
    ++g_init_count;
    return NVML_SUCCESS;
  }
  nvmlReturn_t r = load();
  if (r == NVML_SUCCESS) ++g_init_count;
  return r;
}
NVML_EXPORT nvmlReturn_t nvmlInit() { return nvmlInit_v2(); }
NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int) { return nvmlInit_v2(); }
NVML_EXPORT nvmlReturn_t nvmlShutdown() {
  std::lock_guard lock(g_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --g_init_count;
  return NVML_SUCCESS;
}

NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
  }
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!initialised()) return NVML_ERROR_UNINITIALIZED;
  if (g_device_count == 0) return copyString("unknown", version, length);
  char driver[96] = {};
  if (nvmlReturn_t r = status(&g_devices[0], nullptr, nullptr, nullptr, nullptr, driver, sizeof driver); r != NVML_SUCCESS)
    return r;
  return copyString(driver, version, length);
}
NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return copyString("13.0.gpool", version, length);
}
NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  if (!initialised()) return NVML_ERROR_UNINITIALIZED;
  if (!version) return NVML_ERROR_INVALID_ARGUMENT;
  return fromCu(g_cuda.driver_version(version));
}
NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) { return nvmlSystemGetCudaDriverVersion(version); }

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!initialised()) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(g_device_count);
  return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* d) {
  if (!initialised()) return NVML_ERROR_UNINITIALIZED;
  if (!d || index >= static_cast<unsigned>(g_device_count)) return NVML_ERROR_INVALID_ARGUMENT;
  *d = &g_devices[index];
  return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* d) {
  return nvmlDeviceGetHandleByIndex_v2(index, d);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* d) {
  if (!initialised()) return NVML_ERROR_UNINITIALIZED;
  if (!uuid || !d) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < g_device_count; ++i) {
    CUuuid u;
    if (g_cuda.uuid(&u, i) == CUDA_SUCCESS) {
      if (uuidText(u) == uuid) {
        *d = &g_devices[i];
        return NVML_SUCCESS;
      }
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int* index) {
  int ordinal = 0;
  if (nvmlReturn_t r = device(d, ordinal); r != NVML_SUCCESS) return r;
  if (!index) return NVML_ERROR_INVALID_ARGUMENT;
  *index = static_cast<unsigned>(ordinal);
  return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned int length) {
  int ordinal = 0;
  if (nvmlReturn_t r = device(d, ordinal); r != NVML_SUCCESS) return r;
  char text[256] = {};
  if (CUresult r = g_cuda.name(text, sizeof text - 1, ordinal); r != CUDA_SUCCESS) return fromCu(r);
  return copyString(text, name, length);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid, unsigned int length) {
  int ordinal = 0;
  if (nvmlReturn_t r = device(d, ordinal); r != NVML_SUCCESS) return r;
  CUuuid u;
  if (CUresult r = g_cuda.uuid(&u, ordinal); r != CUDA_SUCCESS) return fromCu(r);
  return copyString(uuidText(u).c_str(), uuid, length);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* memory) {
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long free_bytes = 0, total = 0;
  if (nvmlReturn_t r = status(d, &free_bytes, &total, nullptr, nullptr, nullptr, 0); r != NVML_SUCCESS) return r;
  memory->total = total;
  memory->free = free_bytes;
  memory->used = total - free_bytes;
  return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t* memory) {
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlMemory_t m;
  if (nvmlReturn_t r = nvmlDeviceGetMemoryInfo(d, &m); r != NVML_SUCCESS) return r;
  memory->total = m.total;
  memory->reserved = 0;
  memory->free = m.free;
  memory->used = m.used;
  return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
  if (!u) return NVML_ERROR_INVALID_ARGUMENT;
  return status(d, nullptr, nullptr, &u->gpu, &u->memory, nullptr, 0);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int* major, int* minor) {
  int ordinal = 0;
  if (nvmlReturn_t r = device(d, ordinal); r != NVML_SUCCESS) return r;
  if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
  g_cuda.attribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ordinal);
  g_cuda.attribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ordinal);
  return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* pci) {
  int ordinal = 0;
  if (nvmlReturn_t r = device(d, ordinal); r != NVML_SUCCESS) return r;
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  int domain = 0, bus = 0, dev = 0;
  g_cuda.attribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, ordinal);
  g_cuda.attribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, ordinal);
  g_cuda.attribute(&dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, ordinal);
  std::memset(pci, 0, sizeof *pci);
  pci->domain = static_cast<unsigned>(domain);
  pci->bus = static_cast<unsigned>(bus);
  pci->device = static_cast<unsigned>(dev);
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.0", domain & 0xffff, bus & 0xff, dev & 0xff);
  std::snprintf(pci->busId, sizeof pci->busId, "%08x:%02x:%02x.0", domain, bus & 0xff, dev & 0xff);
  return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t* pci) { return nvmlDeviceGetPciInfo_v3(d, pci); }
NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t* pci) { return nvmlDeviceGetPciInfo_v3(d, pci); }
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int* minor) { return nvmlDeviceGetIndex(d, minor); }

// Queries gpool cannot answer for a remote GPU (power, clocks, fans, ECC, processes, MIG): they answer
// NVML_ERROR_NOT_SUPPORTED, which nvidia-smi shows as "[N/A]" instead of failing to find the symbol.
#define GPOOL_NVML_NOT_SUPPORTED(name) \
  NVML_EXPORT nvmlReturn_t name() { return NVML_ERROR_NOT_SUPPORTED; }
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetTemperature)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetTemperatureV)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetPowerUsage)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetPowerManagementLimit)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetEnforcedPowerLimit)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetFanSpeed)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetFanSpeed_v2)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetClockInfo)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetMaxClockInfo)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetPerformanceState)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetPersistenceMode)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetDisplayMode)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetDisplayActive)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetComputeMode)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetEccMode)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetMigMode)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetBrand)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetSerial)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetVbiosVersion)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetComputeRunningProcesses)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetComputeRunningProcesses_v3)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetGraphicsRunningProcesses)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetGraphicsRunningProcesses_v3)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetBAR1MemoryInfo)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetCurrentClocksEventReasons)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetArchitecture)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetPowerState)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetTotalEnergyConsumption)
// Topology (NCCL asks these): a lease's devices have no NVLink, fabric or confidential-computing state
// visible here.
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetNvLinkState)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetNvLinkCapability)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetNvLinkRemotePciInfo)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetNvLinkRemotePciInfo_v2)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetGpuFabricInfoV)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetPlatformInfo)
GPOOL_NVML_NOT_SUPPORTED(nvmlDeviceGetFieldValues)
GPOOL_NVML_NOT_SUPPORTED(nvmlSystemGetConfComputeState)
GPOOL_NVML_NOT_SUPPORTED(nvmlSystemGetConfComputeSettings)
#undef GPOOL_NVML_NOT_SUPPORTED

// The device with this PCI bus id ("domain:bus:device.function", either width of domain). Two shares of
// one GPU have the same id: the first is answered.
static nvmlReturn_t handleByPciBusId(const char* bus_id, nvmlDevice_t* d, void* caller) {
  if (!initialised()) return NVML_ERROR_UNINITIALIZED;
  if (refuseNccl(caller)) return NVML_ERROR_NOT_SUPPORTED;
  if (!bus_id || !d) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < g_device_count; ++i) {
    nvmlPciInfo_t pci;
    if (nvmlDeviceGetPciInfo_v3(&g_devices[i], &pci) == NVML_SUCCESS && pci.domain == domain && pci.bus == bus && pci.device == dev) {
      *d = &g_devices[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* d) {
  return handleByPciBusId(bus_id, d, __builtin_return_address(0));
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus_id, nvmlDevice_t* d) {
  return handleByPciBusId(bus_id, d, __builtin_return_address(0));
}

// No two devices of a lease reach each other's memory (docs/user.md, "Several GPUs").
NVML_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int /*caps index*/, int* status) {
  int ia = 0, ib = 0;
  if (nvmlReturn_t r = device(a, ia); r != NVML_SUCCESS) return r;
  if (nvmlReturn_t r = device(b, ib); r != NVML_SUCCESS) return r;
  if (!status) return NVML_ERROR_INVALID_ARGUMENT;
  constexpr int kP2pNotSupported = 5;  // NVML_P2P_STATUS_NOT_SUPPORTED
  *status = kP2pNotSupported;
  return NVML_SUCCESS;
}
