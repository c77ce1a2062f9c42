// Initialisation, driver version and device queries: answered locally from the handshake.
#include <cstring>

#include <cstdio>

#include "state.h"

using namespace gpool::client;

// Lets a worker notice it loaded us instead of NVIDIA's driver. (A braced extern "C": a definition, not
// the declaration-with-initializer -Wextra warns about.)
extern "C" {
__attribute__((visibility("default"))) int gpool_client_library = 1;
}

GPOOL_EXPORT CUresult cuInit(unsigned int flags) {
  GPOOL_TRY
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // As CUDA answers in a child forked after its parent initialised it (Triton and PyTorch's compile
  // workers probe with cuInit): the parent's connections are not the child's.
  if (Connection::forkedChild()) return static_cast<CUresult>(Connection::refuseInForkedChild());
  return State::get().init();
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDriverGetVersion(int* version) {
  GPOOL_TRY
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  State::get().init();  // the runtime may ask before cuInit; the answer must match what the worker reports
  *version = State::get().driverVersion();
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

namespace {
CUresult checkDevice(CUdevice d) {
  CUresult err;
  if (!State::get().ready(err)) return err;
  return State::get().device(d) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
}  // namespace

GPOOL_EXPORT CUresult cuDeviceGetCount(int* count) {
  GPOOL_TRY
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  if (!State::get().ready(err)) return err;
  *count = State::get().deviceCount();
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  GPOOL_TRY
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(ordinal)) return r;
  *device = ordinal;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  GPOOL_TRY
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(d)) return r;
  std::strncpy(name, State::get().device(d)->name.c_str(), static_cast<size_t>(len - 1));
  name[len - 1] = 0;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice d) {
  GPOOL_TRY
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(d)) return r;
  std::memcpy(uuid->bytes, State::get().device(d)->uuid.data(), 16);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice d) { return cuDeviceGetUuid(uuid, d); }

GPOOL_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
  GPOOL_TRY
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(d)) return r;
  *bytes = State::get().device(d)->total_mem;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice d) {
  GPOOL_TRY
  if (!value || attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(d)) return r;
  *value = State::get().attribute(d, attr);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice d) {
  GPOOL_TRY
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(d)) return r;
  *major = State::get().attribute(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  *minor = State::get().attribute(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDeviceGetPCIBusId(char* id, int len, CUdevice d) {
  GPOOL_TRY
  if (!id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(d)) return r;
  auto& s = State::get();
  // Four hexadecimal digits of domain, as NVIDIA's driver writes it (read on an H200, driver 580: "0000:00:06.0");
  // NVML's busId has eight.
  std::snprintf(id, static_cast<size_t>(len), "%04x:%02x:%02x.0", s.attribute(d, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
                s.attribute(d, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID), s.attribute(d, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID));
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// The first of the lease's devices at that PCI address ("domain:bus:device.function" or "bus:device.function",
// hexadecimal, as cuDeviceGetPCIBusId writes it). Devices of different hosts may share an address; the
// first is answered.
GPOOL_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice* out, const char* id) {
  GPOOL_TRY
  if (!out || !id) return CUDA_ERROR_INVALID_VALUE;
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  char tail = 0;
  if (std::sscanf(id, "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &tail) != 4) {
    domain = 0;
    if (std::sscanf(id, "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3) return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult err;
  if (!State::get().ready(err)) return err;
  auto& s = State::get();
  for (CUdevice d = 0; d < s.deviceCount(); ++d) {
    if (static_cast<unsigned>(s.attribute(d, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)) == domain &&
        static_cast<unsigned>(s.attribute(d, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)) == bus &&
        static_cast<unsigned>(s.attribute(d, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)) == dev) {
      *out = d;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
  GPOOL_CATCH
}

// The deprecated properties, from the device's attributes.
GPOOL_EXPORT CUresult cuDeviceGetProperties(CUdevprop* p, CUdevice d) {
  GPOOL_TRY
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(d)) return r;
  auto a = [d](CUdevice_attribute attr) { return State::get().attribute(d, attr); };
  p->maxThreadsPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  p->maxThreadsDim[0] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  p->maxThreadsDim[1] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  p->maxThreadsDim[2] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  p->maxGridSize[0] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  p->maxGridSize[1] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  p->maxGridSize[2] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  p->sharedMemPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  p->totalConstantMemory = a(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  p->SIMDWidth = a(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  p->memPitch = a(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  p->regsPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  p->clockRate = a(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  p->textureAlign = a(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t* width, CUarray_format format, unsigned channels, CUdevice d) {
  GPOOL_TRY
  if (!width) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(d)) return r;
  GPOOL_CONN_OF_DEVICE(conn, d);
  std::tuple<uint64_t> r;
  int st = conn->call<gpool::proto::calls::DeviceTexture1DLinearMaxWidth>(r, static_cast<uint32_t>(format), uint32_t{channels});
  *width = std::get<0>(r);
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

// Atomics between this machine and the device: none, over a network (each operation answers 0).
GPOOL_EXPORT CUresult cuDeviceGetHostAtomicCapabilities(unsigned* caps, const CUatomicOperation* ops, unsigned count, CUdevice d) {
  GPOOL_TRY
  if (!caps || (count && !ops)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(d)) return r;
  for (unsigned i = 0; i < count; ++i) caps[i] = 0;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDeviceCanAccessPeer(int* can, CUdevice d, CUdevice peer) {
  GPOOL_TRY
  if (!can) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(d)) return r;
  if (CUresult r = checkDevice(peer)) return r;
  *can = 0;  // each device is its own worker process: a kernel cannot reach another's memory
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute, CUdevice src, CUdevice dst) {
  GPOOL_TRY
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(src)) return r;
  if (CUresult r = checkDevice(dst)) return r;
  *value = 0;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDeviceGetExecAffinitySupport(int* pi, CUexecAffinityType, CUdevice d) {
  GPOOL_TRY
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(d)) return r;
  *pi = 0;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// For gpool's libnvidia-ml.so.1: the device's memory (as its lease sees it), utilization and the GPU
// host's driver version, in one round trip. `driver` receives a NUL-terminated string.
GPOOL_EXPORT CUresult gpool_nvml_device_status(int device, unsigned long long* free_bytes, unsigned long long* total,
                                               unsigned* gpu_percent, unsigned* memory_percent, char* driver,
                                               unsigned driver_len) {
  GPOOL_TRY
  if (device < 0 || device >= State::get().deviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  GPOOL_CONN_OF_DEVICE(conn, device);
  gpool::proto::calls::DeviceStatus::out::tuple r;
  int st = conn->call<gpool::proto::calls::DeviceStatus>(r);
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  if (free_bytes) *free_bytes = std::get<0>(r).free;
  if (total) *total = std::get<0>(r).total;
  if (gpu_percent) *gpu_percent = std::get<1>(r);
  if (memory_percent) *memory_percent = std::get<2>(r);
  if (driver && driver_len) {
    std::snprintf(driver, driver_len, "%s", std::get<3>(r).c_str());
  }
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
