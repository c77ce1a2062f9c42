// Real-driver backend (see cuda_backend.h). Entry points are found by the exported symbol of the prototype
// cuda.h gives each name (Driver::load), so each pointer has the ABI it is called with.
#include "cuda_backend.h"

#include <cuda.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gpool/protocol/gpu_uuid.h"
#include "gpool/protocol/module_image.h"
#include "cuda_forward.h"
#include "sm_partitions.h"

namespace gpool::worker {
namespace {

// Why an operation issued into a stream capture is refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
constexpr const char* kHostCopyInCapture = "copies between client memory and the device";

#define GPOOL_DRIVER_FUNCTIONS(F)                                                                       \
  F(cuInit) F(cuDriverGetVersion) F(cuDeviceGet) F(cuDeviceGetCount) F(cuDeviceGetName)                 \
  F(cuDeviceGetUuid) F(cuDeviceTotalMem) F(cuDeviceGetAttribute) F(cuDevicePrimaryCtxRetain)            \
  F(cuDevicePrimaryCtxRelease) F(cuCtxSetCurrent) F(cuMemAlloc) F(cuMemFree) F(cuMemGetInfo)            \
  F(cuMemcpyHtoD) F(cuMemcpyHtoDAsync) F(cuMemcpyDtoH) F(cuMemcpyDtoHAsync) F(cuMemcpyDtoD)             \
  F(cuMemcpyDtoDAsync) F(cuMemcpy) F(cuMemcpyAsync) F(cuMemHostRegister) F(cuMemHostUnregister) F(cuMemHostGetDevicePointer) F(cuMemsetD8) F(cuMemsetD16) F(cuMemsetD32) F(cuMemsetD8Async)                   \
  F(cuMemsetD16Async) F(cuMemsetD32Async) F(cuMemGetAddressRange) F(cuStreamCreateWithPriority)         \
  F(cuStreamDestroy) F(cuStreamSynchronize) F(cuStreamQuery) F(cuStreamWaitEvent) F(cuEventCreate)      \
  F(cuEventDestroy) F(cuEventRecordWithFlags) F(cuEventSynchronize) F(cuEventQuery)                     \
  F(cuEventElapsedTime) F(cuCtxSynchronize) F(cuCtxSetLimit) F(cuCtxGetLimit) F(cuModuleLoadData)       \
  F(cuModuleUnload) F(cuModuleGetFunction) F(cuModuleGetGlobal) F(cuLibraryLoadData) F(cuLibraryUnload) \
  F(cuLibraryGetKernel) F(cuLibraryGetGlobal) F(cuKernelGetFunction) F(cuFuncGetParamInfo)              \
  F(cuFuncGetAttribute) F(cuFuncSetAttribute) F(cuFuncSetCacheConfig) F(cuLaunchKernelEx)               \
  F(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) F(cuGetErrorName) F(cuMemHostAlloc) F(cuMemFreeHost) F(cuOccupancyAvailableDynamicSMemPerBlock) F(cuOccupancyMaxActiveClusters)         \
  F(cuStreamBeginCapture) F(cuStreamEndCapture) F(cuStreamGetCaptureInfo) F(cuStreamIsCapturing)          \
  F(cuThreadExchangeStreamCaptureMode) F(cuGraphInstantiateWithFlags) F(cuGraphLaunch) F(cuGraphUpload)   \
  F(cuGraphExecDestroy) F(cuGraphDestroy) F(cuGraphGetNodes) F(cuModuleGetFunctionCount)                 \
  F(cuModuleEnumerateFunctions) F(cuFuncGetName) F(cuLibraryGetKernelCount) F(cuLibraryEnumerateKernels)   \
  F(cuKernelGetName) F(cuTensorMapEncodeTiled) F(cuTensorMapEncodeIm2col) F(cuTensorMapReplaceAddress)   \
  F(cuMemAllocPitch) F(cuMemsetD2D8) F(cuMemsetD2D16) F(cuMemsetD2D32) F(cuMemsetD2D8Async)                 \
  F(cuMemsetD2D16Async) F(cuMemsetD2D32Async) F(cuMemcpy2D) F(cuMemcpy2DAsync) F(cuMemAllocAsync)       \
  F(cuMemAllocFromPoolAsync) F(cuMemFreeAsync) F(cuMemPoolCreate) F(cuMemPoolDestroy) F(cuMemPoolTrimTo)   \
  F(cuDeviceGetMemPool) F(cuDeviceGetDefaultMemPool) F(cuDeviceSetMemPool) F(cuMemPoolSetAttribute)        \
  F(cuMemPoolGetAttribute) F(cuStreamWaitValue32) F(cuStreamWaitValue64) F(cuStreamWriteValue32)       \
  F(cuStreamWriteValue64) F(cuMemGetAllocationGranularity) F(cuMemAddressReserve) F(cuMemAddressFree)       \
  F(cuMemCreate) F(cuMemRelease) F(cuMemMap) F(cuMemUnmap) F(cuMemSetAccess) F(cuLinkCreate) F(cuLinkAddData) \
  F(cuLinkComplete) F(cuLinkDestroy) F(cuDevicePrimaryCtxReset) F(cuLaunchHostFunc) F(cuGraphCreate)       \
  F(cuGraphAddEmptyNode) F(cuGraphAddKernelNode) F(cuGraphAddMemsetNode) F(cuGraphAddMemcpyNode)            \
  F(cuGraphAddHostNode) F(cuGraphAddEventRecordNode) F(cuGraphAddEventWaitNode) F(cuGraphAddChildGraphNode) \
  F(cuGraphAddDependencies) F(cuGraphDestroyNode) F(cuGraphKernelNodeSetParams) F(cuGraphExecKernelNodeSetParams) \
  F(cuGraphExecUpdate) F(cuIpcGetMemHandle) F(cuIpcOpenMemHandle) F(cuIpcCloseMemHandle) F(cuIpcGetEventHandle) \
  F(cuIpcOpenEventHandle) F(cuGraphExecMemsetNodeSetParams) F(cuGraphExecMemcpyNodeSetParams)            \
  F(cuGraphExecHostNodeSetParams) F(cuGraphConditionalHandleCreate) F(cuGraphAddNode) F(cuGraphNodeGetType)    \
  F(cuGraphGetEdges) F(cuGraphClone) F(cuGraphNodeFindInClone) F(cuGraphRemoveDependencies)                \
  F(cuGraphNodeSetEnabled) F(cuGraphNodeGetEnabled) F(cuGraphExecChildGraphNodeSetParams)                   \
  F(cuGraphExecEventRecordNodeSetEvent) F(cuGraphExecEventWaitNodeSetEvent) F(cuGraphEventRecordNodeSetEvent) \
  F(cuGraphEventWaitNodeSetEvent) F(cuGraphMemsetNodeSetParams) F(cuGraphMemcpyNodeSetParams)              \
  F(cuGraphHostNodeSetParams) F(cuStreamBeginCaptureToGraph) F(cuGraphChildGraphNodeGetGraph) \
  F(cuGraphKernelNodeSetAttribute) F(cuGraphKernelNodeGetAttribute) F(cuGraphKernelNodeCopyAttributes)   \
  F(cuArray3DCreate) F(cuArrayDestroy) F(cuMemcpy3D) F(cuMemcpy3DAsync) F(cuTexObjectCreate)          \
  F(cuTexObjectDestroy) F(cuSurfObjectCreate) F(cuSurfObjectDestroy) F(cuStreamSetAttribute)          \
  F(cuStreamGetAttribute) F(cuStreamCopyAttributes) F(cuMipmappedArrayCreate) F(cuMipmappedArrayGetLevel)   \
  F(cuMipmappedArrayDestroy) F(cuGraphAddMemAllocNode) F(cuGraphAddMemFreeNode) F(cuGraphMemAllocNodeGetParams)       \
  F(cuGraphMemFreeNodeGetParams) F(cuDeviceGraphMemTrim) F(cuDeviceGetGraphMemAttribute) F(cuDeviceSetGraphMemAttribute) \
  F(cuUserObjectCreate) F(cuUserObjectRetain) F(cuUserObjectRelease) F(cuGraphRetainUserObject) F(cuGraphReleaseUserObject) \
  F(cuStreamUpdateCaptureDependencies) F(cuCtxRecordEvent) F(cuCtxWaitEvent) F(cuCtxResetPersistingL2Cache) F(cuPointerSetAttribute) \
  F(cuOccupancyMaxPotentialClusterSize) F(cuDeviceGetTexture1DLinearMaxWidth) F(cuLibraryGetManaged) \
  F(cuFlushGPUDirectRDMAWrites) F(cuLibraryGetModule) F(cuMemExportToShareableHandle) F(cuMemImportFromShareableHandle) \
  F(cuMemPoolExportToShareableHandle) F(cuMemPoolImportFromShareableHandle) F(cuMemPoolExportPointer) F(cuMemPoolImportPointer) \
  F(cuGraphAddBatchMemOpNode) F(cuGraphBatchMemOpNodeSetParams) F(cuGraphExecBatchMemOpNodeSetParams)         \
  F(cuGraphKernelNodeGetParams) F(cuGraphMemsetNodeGetParams) F(cuGraphMemcpyNodeGetParams)                   \
  F(cuGraphEventRecordNodeGetEvent) F(cuGraphEventWaitNodeGetEvent) F(cuGraphHostNodeGetParams) F(cuPointerGetAttribute) \
  F(cuDeviceGetDevResource) F(cuGreenCtxGetDevResource) F(cuDevSmResourceSplitByCount) F(cuDevResourceGenerateDesc)   \
  F(cuGreenCtxCreate) F(cuGreenCtxDestroy) F(cuGreenCtxStreamCreate) F(cuGreenCtxRecordEvent) F(cuGreenCtxWaitEvent)

// NVML on the GPU host, for utilization, the driver version and, before the worker has a context, the
// device's free memory (optional: zeros when absent).
class Nvml {
 public:
  // The device's free memory, as cuMemGetInfo would give it, without a context; false without NVML.
  bool freeMemory(const std::array<uint8_t, 16>& uuid, uint64_t& free) {
    if (!load() || !memory_info_) return false;
    struct { unsigned long long total, free, used; } m{};  // nvmlMemory_t
    void* device = handleOf(uuid);
    if (!device || memory_info_(device, &m) != 0) return false;
    free = m.free;
    return true;
  }
  void query(const std::array<uint8_t, 16>& uuid, uint32_t& gpu, uint32_t& memory, std::string& driver) {
    gpu = memory = 0;
    driver = "unknown";
    if (!load()) return;
    char version[96] = {};
    if (system_driver_version_(version, sizeof version - 1) == 0) driver = version;
    void* device = handleOf(uuid);
    struct { unsigned gpu, memory; } util{};
    if (device && utilization_(device, &util) == 0) {
      gpu = util.gpu;
      memory = util.memory;
    }
  }

 private:
  // NVML's handle of the device (loaded), looked up once; null when NVML does not know it.
  void* handleOf(const std::array<uint8_t, 16>& uuid) {
    if (!handle_ && by_uuid_(proto::gpuUuidText(uuid.data()).c_str(), &handle_) != 0) handle_ = nullptr;
    return handle_;
  }
  bool load() {
    if (tried_) return ready_;
    tried_ = true;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib || dlsym(lib, "gpool_nvml_shim")) return false;  // absent, or gpool's own shim
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    system_driver_version_ = reinterpret_cast<int (*)(char*, unsigned)>(dlsym(lib, "nvmlSystemGetDriverVersion"));
    by_uuid_ = reinterpret_cast<int (*)(const char*, void**)>(dlsym(lib, "nvmlDeviceGetHandleByUUID"));
    utilization_ = reinterpret_cast<int (*)(void*, void*)>(dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    memory_info_ = reinterpret_cast<int (*)(void*, void*)>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    ready_ = init && system_driver_version_ && by_uuid_ && utilization_ && init() == 0;
    return ready_;
  }
  bool tried_ = false, ready_ = false;
  int (*system_driver_version_)(char*, unsigned) = nullptr;
  int (*by_uuid_)(const char*, void**) = nullptr;
  int (*utilization_)(void*, void*) = nullptr;
  int (*memory_info_)(void*, void*) = nullptr;
  void* handle_ = nullptr;  // (one worker, one device)
};

struct Driver {
  void* lib = nullptr;
#define F(name) decltype(&name) name##_ = nullptr;
  GPOOL_DRIVER_FUNCTIONS(F)
#undef F
  std::string error;

  bool load() {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      error = std::string("cannot load libcuda.so.1: ") + dlerror();
      return false;
    }
    if (dlsym(lib, "gpool_client_library")) {
      error = "libcuda.so.1 found first is gpool's client library, not NVIDIA's driver; remove gpool's lib "
              "directory from LD_LIBRARY_PATH/LD_PRELOAD for gpool-server";
      return false;
    }
    // Each function by the symbol of the very prototype cuda.h gives its name here (cuMemAlloc is
    // cuMemAlloc_v2, cuCtxSynchronize is cuCtxSynchronize), not by cuGetProcAddress at CUDA_VERSION: that
    // answers the newest version, whose parameters may differ. On CUDA 13 it answered cuCtxSynchronize_v2,
    // which takes a context: called without one, every cuCtxSynchronize of the first GPU run read a stray
    // register as its context and failed with CUDA_ERROR_CONTEXT_IS_DESTROYED.
#define GPOOL_SYMBOL_OF(name) GPOOL_STRINGIFY(name)
#define GPOOL_STRINGIFY(name) #name
#define F(name)                                                                                       \
  if (!(name##_ = reinterpret_cast<decltype(name##_)>(dlsym(lib, GPOOL_SYMBOL_OF(name))))) {          \
    error = std::string("the driver does not provide ") + GPOOL_SYMBOL_OF(name) + " (a driver older than CUDA " + \
            std::to_string(CUDA_VERSION / 1000) + "?)";                                              \
    return false;                                                                                     \
  }
    GPOOL_DRIVER_FUNCTIONS(F)
#undef F
#undef GPOOL_SYMBOL_OF
#undef GPOOL_STRINGIFY
    return true;
  }
};

Driver& driver() {
  static Driver d;
  return d;
}

class CudaBackend final : public Backend {
 public:
  // The run() overrides, one per call in calls.def, each calling the member of the call's name below.
#define X(name, number, mode, ins, outs) GPOOL_BACKEND_RUN(name)
#include "gpool/protocol/calls.def"
#undef X

  ~CudaBackend() override {
    // Exiting the process frees everything; release the context for a tidy driver state.
    releaseBuffers();
    for (; ctx_ && retains_ > 0; --retains_) d_.cuDevicePrimaryCtxRelease_(dev_);
  }
  // The page-locked receive slots, staging buffer and timing events (made again on next use).
  void releaseBuffers() {
    for (auto& slot : slots_) {
      if (slot.in_use) d_.cuEventSynchronize_(slot.done);
      if (slot.done) d_.cuEventDestroy_(slot.done);
      if (slot.data) d_.cuMemFreeHost_(slot.data);
      slot = Slot{};
    }
    if (staging_) d_.cuMemFreeHost_(staging_);
    staging_ = nullptr;
    staging_size_ = 0;
    for (auto [start, end] : timed_) spare_events_.insert(spare_events_.end(), {start, end});  // (unmeasured)
    timed_.clear();
    for (CUevent e : spare_events_) d_.cuEventDestroy_(e);
    spare_events_.clear();
  }

  void* stagingBuffer(size_t bytes) override {
    if (bytes > staging_size_) {
      if (staging_) d_.cuMemFreeHost_(staging_);
      staging_ = nullptr;
      staging_size_ = 0;
      if (d_.cuMemHostAlloc_(&staging_, bytes, 0) != CUDA_SUCCESS) return Backend::stagingBuffer(bytes);
      staging_size_ = bytes;
    }
    return staging_;
  }

  // Requests are received into page-locked slots, so a host-to-device copy from one runs asynchronously
  // (the driver stages pageable memory synchronously). A slot an unfinished copy reads is not handed out
  // again until its event completes; small requests keep reusing the current slot.
  void setMemoryCap(uint64_t bytes) override { cap_ = bytes; }

  uint8_t* frameBuffer(size_t bytes) override {
    if (!ctx_) return Backend::frameBuffer(bytes);
    Slot* s = &slots_[current_];
    if (s->in_use) {
      current_ = (current_ + 1) % slots_.size();
      s = &slots_[current_];
      if (s->in_use) {
        d_.cuEventSynchronize_(s->done);
        s->in_use = false;
      }
    }
    if (s->capacity < bytes) {
      if (s->data) d_.cuMemFreeHost_(s->data);
      s->data = nullptr;
      s->capacity = 0;
      size_t want = std::max<size_t>(bytes, size_t{1} << 16);
      if (d_.cuMemHostAlloc_(&s->data, want, 0) != CUDA_SUCCESS) return Backend::frameBuffer(bytes);
      s->capacity = want;
    }
    return static_cast<uint8_t*>(s->data);
  }

  Status open(int device, proto::HelloReply& hello) override {
    if (!d_.lib && !d_.load()) {
      spdlog::error("{}", d_.error);
      return CUDA_ERROR_NO_DEVICE;
    }
    CUresult r = d_.cuInit_(0);
    if (r != CUDA_SUCCESS) return r;
    int count = 0;
    if ((r = d_.cuDeviceGetCount_(&count)) != CUDA_SUCCESS) return r;
    if (device < 0 || device >= count) return CUDA_ERROR_INVALID_DEVICE;
    if ((r = d_.cuDeviceGet_(&dev_, device)) != CUDA_SUCCESS) return r;
    int version = 0;
    d_.cuDriverGetVersion_(&version);
    hello.driver_version = static_cast<uint32_t>(version);
    hello.backend = "cuda";
    proto::DeviceInfo info;
    char name[256] = {};
    d_.cuDeviceGetName_(name, sizeof name - 1, dev_);
    info.name = name;
    CUuuid uuid;
    d_.cuDeviceGetUuid_(&uuid, dev_);
    std::memcpy(info.uuid.data(), uuid.bytes, 16);
    std::memcpy(uuid_.data(), uuid.bytes, 16);
    size_t total = 0;
    d_.cuDeviceTotalMem_(&total, dev_);
    total_ = total;
    info.total_mem = cap_ ? std::min<uint64_t>(cap_, total) : total;
    info.attributes.assign(CU_DEVICE_ATTRIBUTE_MAX, 0);
    for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) {
      int v = 0;
      if (d_.cuDeviceGetAttribute_(&v, static_cast<CUdevice_attribute>(a), dev_) == CUDA_SUCCESS) info.attributes[a] = v;
    }
    hello.devices.push_back(std::move(info));
    return CUDA_SUCCESS;
  }

  // Calls forwarded as they are: the worker checked their handles, the driver checks the rest.
  GPOOL_FORWARD(MemFree, cuMemFree)
  GPOOL_FORWARD(StreamCreate, cuStreamCreateWithPriority)
  GPOOL_FORWARD(StreamDestroy, cuStreamDestroy)
  GPOOL_FORWARD(StreamSynchronize, cuStreamSynchronize)
  GPOOL_FORWARD(StreamQuery, cuStreamQuery)
  GPOOL_FORWARD(StreamWaitEvent, cuStreamWaitEvent)
  GPOOL_FORWARD(EventCreate, cuEventCreate)
  GPOOL_FORWARD(EventDestroy, cuEventDestroy)
  GPOOL_FORWARD(EventRecord, cuEventRecordWithFlags)
  GPOOL_FORWARD(EventSynchronize, cuEventSynchronize)
  GPOOL_FORWARD(EventQuery, cuEventQuery)
  GPOOL_FORWARD(EventElapsedTime, cuEventElapsedTime)
  GPOOL_FORWARD(CtxSynchronize, cuCtxSynchronize)
  GPOOL_FORWARD(CtxSetLimit, cuCtxSetLimit)
  Status CtxRecordEvent(Event e) { return d_.cuCtxRecordEvent_(ctx_, reinterpret_cast<CUevent>(e.v)); }
  Status CtxWaitEvent(Event e) { return d_.cuCtxWaitEvent_(ctx_, reinterpret_cast<CUevent>(e.v)); }

  // Green contexts (sm_partitions.h): the client's resources are recipes, made into the driver's again here.
  // A green context's streams and events are the driver's, used with the primary context current.
  Status SmResourceSplit(SmSource source, SmSplit split, std::vector<uint32_t>& out) {
    std::vector<CUdevResource> parts;
    if (Status st = smParts(source, split, parts)) return st;
    for (const CUdevResource& p : parts) out.insert(out.end(), {p.sm.smCount, p.sm.minSmPartitionSize, p.sm.smCoscheduledAlignment});
    return CUDA_SUCCESS;
  }
  Status GreenCtxCreate(SmSource source, SmSplit split, const std::vector<uint32_t>& picks, uint32_t flags, Created<GreenCtx>& out) {
    std::vector<CUdevResource> parts, chosen;
    if (Status st = smParts(source, split, parts)) return st;
    std::vector<size_t> indexes;
    if (Status st = pickParts(split.groups != 0, parts.size() - 1, picks, indexes)) return st;
    for (size_t i : indexes) chosen.push_back(parts[i]);
    CUdevResourceDesc desc = nullptr;  // (the driver has no call that frees one)
    CUresult r = d_.cuDevResourceGenerateDesc_(&desc, chosen.data(), static_cast<unsigned>(chosen.size()));
    CUgreenCtx g = nullptr;
    if (r == CUDA_SUCCESS) r = d_.cuGreenCtxCreate_(&g, desc, dev_, flags);
    if (r != CUDA_SUCCESS) return r;
    greens_.insert(g);
    out = reinterpret_cast<uint64_t>(g);
    return CUDA_SUCCESS;
  }
  Status GreenCtxDestroy(Released<GreenCtx> g) {
    CUresult r = d_.cuGreenCtxDestroy_(reinterpret_cast<CUgreenCtx>(g.v));
    if (r == CUDA_SUCCESS) greens_.erase(reinterpret_cast<CUgreenCtx>(g.v));
    return r;
  }
  GPOOL_FORWARD(GreenCtxStreamCreate, cuGreenCtxStreamCreate)
  GPOOL_FORWARD(GreenCtxRecordEvent, cuGreenCtxRecordEvent)
  GPOOL_FORWARD(GreenCtxWaitEvent, cuGreenCtxWaitEvent)
  // The source's SMs (a green context's, or the device's all), split as `split` says: the groups made,
  // then the remainder; or the source whole.
  Status smParts(SmSource source, SmSplit split, std::vector<CUdevResource>& parts) {
    CUdevResource whole{};
    CUresult r = source.v ? d_.cuGreenCtxGetDevResource_(reinterpret_cast<CUgreenCtx>(source.v), &whole, CU_DEV_RESOURCE_TYPE_SM)
                          : d_.cuDeviceGetDevResource_(dev_, &whole, CU_DEV_RESOURCE_TYPE_SM);
    if (r != CUDA_SUCCESS) return r;
    parts.assign(1, whole);
    if (split.groups == 0) return CUDA_SUCCESS;
    unsigned made = std::min(split.groups, std::max(whole.sm.smCount, 1u));  // (no more groups than SMs)
    parts.assign(made, CUdevResource{});
    CUdevResource remainder{};
    r = d_.cuDevSmResourceSplitByCount_(parts.data(), &made, &whole, &remainder, split.flags, split.min_count);
    if (r != CUDA_SUCCESS) return r;
    parts.resize(made);
    parts.push_back(remainder);
    return CUDA_SUCCESS;
  }
  GPOOL_FORWARD(CtxResetPersistingL2Cache, cuCtxResetPersistingL2Cache)
  Status FlushGPUDirectRDMAWrites(uint32_t target, uint32_t scope) {
    return d_.cuFlushGPUDirectRDMAWrites_(static_cast<CUflushGPUDirectRDMAWritesTarget>(target),
                                          static_cast<CUflushGPUDirectRDMAWritesScope>(scope));
  }
  Status PointerSetSyncMemops(DevAddress p, uint32_t value) {
    if (value > 1) return CUDA_ERROR_INVALID_VALUE;
    int v = static_cast<int>(value);
    return d_.cuPointerSetAttribute_(&v, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p.ptr);
  }
  GPOOL_FORWARD(CtxGetLimit, cuCtxGetLimit)
  GPOOL_FORWARD(KernelGetFunction, cuKernelGetFunction)
  GPOOL_FORWARD(StreamBeginCapture, cuStreamBeginCapture)
  GPOOL_FORWARD(GraphInstantiate, cuGraphInstantiateWithFlags)
  GPOOL_FORWARD(GraphLaunch, cuGraphLaunch)
  GPOOL_FORWARD(GraphUpload, cuGraphUpload)
  GPOOL_FORWARD(GraphExecDestroy, cuGraphExecDestroy)
  GPOOL_FORWARD(GraphDestroy, cuGraphDestroy)
  GPOOL_FORWARD(GraphClone, cuGraphClone)
  GPOOL_FORWARD(MemFreeAsync, cuMemFreeAsync)
  Status MemPoolDestroy(Released<MemPool> p) {
    shareable_.withdraw(ShareableHandles::Object::kPool, p.v);
    return d_.cuMemPoolDestroy_(reinterpret_cast<CUmemoryPool>(p.v));
  }
  GPOOL_FORWARD(MemPoolTrimTo, cuMemPoolTrimTo)

  Status StreamWaitValue(Stream stream, DevWord w, uint64_t value, uint32_t flags) {
    return w.bytes == 4 ? d_.cuStreamWaitValue32_(stream_(stream), w.ptr, static_cast<cuuint32_t>(value), flags)
                        : d_.cuStreamWaitValue64_(stream_(stream), w.ptr, value, flags);
  }
  Status StreamWriteValue(Stream stream, DevWord w, uint64_t value, uint32_t flags) {
    return w.bytes == 4 ? d_.cuStreamWriteValue32_(stream_(stream), w.ptr, static_cast<cuuint32_t>(value), flags)
                        : d_.cuStreamWriteValue64_(stream_(stream), w.ptr, value, flags);
  }
  // Virtual memory management: physical memory on the worker's device, whatever the client numbered it.
  CUmemAllocationProp deviceProp(uint32_t handle_types = 0, uint32_t compression = 0, uint32_t usage = 0) const {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, dev_};
    prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(handle_types);
    prop.allocFlags.compressionType = static_cast<unsigned char>(compression);
    prop.allocFlags.usage = static_cast<unsigned short>(usage);
    return prop;
  }
  Status MemGetGranularity(uint32_t option, uint64_t& bytes) {
    CUmemAllocationProp prop = deviceProp();
    size_t g = 0;
    CUresult r = d_.cuMemGetAllocationGranularity_(&g, &prop, static_cast<CUmemAllocationGranularity_flags>(option));
    bytes = g;
    return r;
  }
  Status MemAddressReserve(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t flags, Created<VaRange>& out) {
    CUdeviceptr p = 0;
    CUresult r = d_.cuMemAddressReserve_(&p, size, alignment, hint, flags);
    out.ptr = p;
    out.size = size;
    return r;
  }
  Status MemAddressFree(Released<VaRange> r) { return d_.cuMemAddressFree_(r.ptr, r.size); }
  Status MemCreate(AllocBytes bytes, uint32_t handle_types, uint32_t compression, uint32_t usage, Created<Physical>& out) {
    CUmemAllocationProp prop = deviceProp(handle_types, compression, usage);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = d_.cuMemCreate_(&h, bytes, &prop, 0);
    out = h;
    return r;
  }
  Status MemRelease(Released<Physical> h) {
    // (Its export, if any, was ended by the worker, which also lets go of it once imported and unmapped: import_holds.h.)
    return d_.cuMemRelease_(h.v);
  }
  Status MemMap(VaMap m) { return d_.cuMemMap_(m.ptr, m.size, m.offset, m.physical.v, 0); }
  Status MemUnmap(VaUnmap u) { return d_.cuMemUnmap_(u.ptr, u.size); }
  Status MemSetAccess(VaMapped m, uint32_t flags) {
    CUmemAccessDesc desc{CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, dev_}, static_cast<CUmemAccess_flags>(flags)};
    return d_.cuMemSetAccess_(m.ptr, m.size, &desc, 1);
  }

  // JIT linking: the driver's link state, with log buffers the worker owns and the inputs kept until the
  // link is destroyed. So are the option arrays given to cuLinkCreate: the driver keeps them and writes
  // its answers (log sizes, wall time) into them at cuLinkComplete (a local array there crashed the
  // worker inside NVIDIA's JIT compiler on the first GPU run).
  struct Link {
    CUlinkState state = nullptr;
    std::vector<char> info = std::vector<char>(1 << 14), error = std::vector<char>(1 << 14);
    std::vector<std::vector<uint8_t>> inputs;
    std::vector<CUjit_option> option_ids;
    std::vector<void*> option_values;
  };
  std::unordered_map<uint64_t, std::unique_ptr<Link>> links_;
  static std::vector<char> logOf(const std::vector<char>& buffer) {
    return std::vector<char>(buffer.begin(), std::find(buffer.begin(), buffer.end(), '\0'));
  }
  Status LinkCreate(JitOptions o, Created<LinkState>& out) {
    auto link = std::make_unique<Link>();
    std::vector<CUjit_option>& ids = link->option_ids;
    std::vector<void*>& values = link->option_values;
    for (size_t i = 0; i < o.ids.size(); ++i) {
      ids.push_back(static_cast<CUjit_option>(o.ids[i]));
      values.push_back(reinterpret_cast<void*>(o.values[i]));  // numbers travel in the pointer slot
    }
    for (auto [id, value] : {std::pair{CU_JIT_INFO_LOG_BUFFER, static_cast<void*>(link->info.data())},
                             std::pair{CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, reinterpret_cast<void*>(link->info.size())},
                             std::pair{CU_JIT_ERROR_LOG_BUFFER, static_cast<void*>(link->error.data())},
                             std::pair{CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, reinterpret_cast<void*>(link->error.size())}}) {
      ids.push_back(id);
      values.push_back(value);
    }
    CUresult r = d_.cuLinkCreate_(static_cast<unsigned>(ids.size()), ids.data(), values.data(), &link->state);
    if (r != CUDA_SUCCESS) return r;
    out = reinterpret_cast<uint64_t>(link->state);
    links_[out.v] = std::move(link);
    return CUDA_SUCCESS;
  }
  Status LinkAddData(LinkState l, uint32_t type, Blob data, std::string name, std::vector<char>& error_log) {
    Link& link = *links_.at(l.v);
    const auto* p = static_cast<const uint8_t*>(data.data);
    link.inputs.emplace_back(p, p + data.size);
    if (type == CU_JIT_INPUT_PTX && link.inputs.back().back() != 0) link.inputs.back().push_back(0);  // PTX ends in a NUL
    CUresult r = d_.cuLinkAddData_(link.state, static_cast<CUjitInputType>(type), link.inputs.back().data(),
                                   link.inputs.back().size(), name.c_str(), 0, nullptr, nullptr);
    if (r != CUDA_SUCCESS) error_log = logOf(link.error);
    return r;
  }
  Status LinkComplete(LinkState l, std::vector<uint8_t>& image, std::vector<char>& info_log, std::vector<char>& error_log) {
    Link& link = *links_.at(l.v);
    void* cubin = nullptr;
    size_t size = 0;
    CUresult r = d_.cuLinkComplete_(link.state, &cubin, &size);
    if (r == CUDA_SUCCESS) image.assign(static_cast<uint8_t*>(cubin), static_cast<uint8_t*>(cubin) + size);
    info_log = logOf(link.info);
    error_log = logOf(link.error);
    return r;
  }
  Status LinkDestroy(Released<LinkState> l) {
    auto it = links_.find(l.v);
    CUresult r = d_.cuLinkDestroy_(it->second->state);
    links_.erase(it);
    return r;
  }

  // A host function: the driver's callback thread waits, in stream order, until the client's function
  // has returned. A captured one (a graph's host node) runs at every replay, so its argument lives as
  // long as the backend; one launched directly runs once and frees its argument.
  struct HostFuncArg {
    HostCallbacks* callbacks;
    uint64_t id;
  };
  std::deque<HostFuncArg> host_funcs_;  // the captured ones (and graphs' host nodes)
  HostFuncArg* keepHostFunc(uint64_t id) {
    host_funcs_.push_back(HostFuncArg{&callbacks_, id});
    return &host_funcs_.back();
  }
  static void CUDA_CB hostFunc(void* p) {
    auto* a = static_cast<HostFuncArg*>(p);
    a->callbacks->run(a->id);
  }
  static void CUDA_CB hostFuncOnce(void* p) {
    std::unique_ptr<HostFuncArg> a(static_cast<HostFuncArg*>(p));
    a->callbacks->run(a->id);
  }
  Status LaunchHostFunc(Stream stream, uint64_t id) {
    if (capturing(stream)) {
      return d_.cuLaunchHostFunc_(stream_(stream), &hostFunc, keepHostFunc(id));
    }
    auto arg = std::make_unique<HostFuncArg>(HostFuncArg{&callbacks_, id});
    CUresult r = d_.cuLaunchHostFunc_(stream_(stream), &hostFuncOnce, arg.get());
    if (r == CUDA_SUCCESS) arg.release();  // the callback frees it
    return r;
  }

  // A copy between the client's memory and the device, captured: a host node fetches the client's rows
  // into a staging buffer before a copy from it, or delivers them after a copy into it. A user object
  // the graph holds owns the buffer: it goes with the graph, its clones and its instantiations.
  // The buffer is page-locked: the driver stages a copy from pageable memory when the work is issued, not
  // in stream order, so a replay copied the rows its fetch had not yet written (the first GPU run's
  // replays each saw the round before). Buffers come back from the user object's destructor, which runs
  // on a driver thread that may call no CUDA: it only returns them, for later copies. A context reset
  // frees them all, and buffers of an earlier context are not taken back.
  struct PinnedBlocks {
    std::mutex mu;
    std::multimap<size_t, uint8_t*> idle;  // by capacity
    uint64_t context = 0;                  // counts resets
  };
  struct HostCopyArg {
    HostCallbacks* callbacks;
    uint64_t id;
    std::shared_ptr<PinnedBlocks> blocks;
    uint64_t context;
    uint8_t* rows;
    size_t bytes, capacity;
  };
  static void CUDA_CB freeHostCopy(void* p) {
    std::unique_ptr<HostCopyArg> a(static_cast<HostCopyArg*>(p));
    std::lock_guard lock(a->blocks->mu);
    if (a->context == a->blocks->context) a->blocks->idle.emplace(a->capacity, a->rows);
  }
  // A staging buffer of at least `bytes`, idle or new; null when no page-locked memory is left. The
  // lock is not held across the driver's call (a destructor may wait for it on a driver thread).
  HostCopyArg* stagingFor(uint64_t id, size_t bytes) {
    auto a = std::make_unique<HostCopyArg>(HostCopyArg{&callbacks_, id, host_copy_blocks_, 0, nullptr, bytes, 0});
    {
      std::lock_guard lock(host_copy_blocks_->mu);
      a->context = host_copy_blocks_->context;
      if (auto it = host_copy_blocks_->idle.lower_bound(bytes); it != host_copy_blocks_->idle.end()) {
        a->capacity = it->first;
        a->rows = it->second;
        host_copy_blocks_->idle.erase(it);
        return a.release();
      }
    }
    void* p = nullptr;
    a->capacity = std::max<size_t>(bytes, 1);
    if (d_.cuMemHostAlloc_(&p, a->capacity, 0) != CUDA_SUCCESS) return nullptr;
    a->rows = static_cast<uint8_t*>(p);
    return a.release();
  }
  // Gives `a` to graph `g` (the driver frees it once no graph or instantiation holds it).
  CUresult keepWith(CUgraph g, HostCopyArg* a) {
    CUuserObject obj = nullptr;
    if (CUresult r = d_.cuUserObjectCreate_(&obj, a, &freeHostCopy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC); r != CUDA_SUCCESS) {
      freeHostCopy(a);
      return r;
    }
    CUresult r = g ? d_.cuGraphRetainUserObject_(g, obj, 1, CU_GRAPH_USER_OBJECT_MOVE) : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (r != CUDA_SUCCESS) d_.cuUserObjectRelease_(obj, 1);  // frees `a`
    return r;
  }
  static void CUDA_CB fetchRows(void* p) {
    auto* a = static_cast<HostCopyArg*>(p);
    a->callbacks->fetch(a->id, a->rows, a->bytes);
  }
  static void CUDA_CB deliverRows(void* p) {
    auto* a = static_cast<HostCopyArg*>(p);
    a->callbacks->deliver(a->id, a->rows, a->bytes);
  }
  // Its staging buffer, and the copy between it and the device rows (null: no page-locked memory left).
  HostCopyArg* hostCopy(uint64_t id, const HostRowsCopy& c, CUDA_MEMCPY3D& p) {
    HostCopyArg* a = stagingFor(id, c.bytes());
    if (!a) return nullptr;
    p = CUDA_MEMCPY3D{};
    p.WidthInBytes = c.device.width;
    p.Height = c.device.height;
    p.Depth = 1;
    if (c.toDevice()) {
      p.srcMemoryType = CU_MEMORYTYPE_HOST;
      p.srcHost = a->rows;
      p.srcPitch = c.device.width;
      p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      p.dstDevice = c.device.ptr;
      p.dstPitch = c.device.pitch;
    } else {
      p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      p.srcDevice = c.device.ptr;
      p.srcPitch = c.device.pitch;
      p.dstMemoryType = CU_MEMORYTYPE_HOST;
      p.dstHost = a->rows;
      p.dstPitch = c.device.width;
    }
    return a;
  }
  Status HostCopyCapture(HostRowsCopy c, Stream stream, uint64_t id, uint32_t& captured) {
    captured = 0;
    if (!capturing(stream)) return CUDA_SUCCESS;  // the client copies as usual
    CUDA_MEMCPY3D p;
    HostCopyArg* a = hostCopy(id, c, p);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult kept = keepWith(reinterpret_cast<CUgraph>(captureGraph(stream)), a);
    if (kept != CUDA_SUCCESS) return kept;
    CUstream s = stream_(stream);
    CUresult r = c.toDevice() ? d_.cuLaunchHostFunc_(s, &fetchRows, a) : d_.cuMemcpy3DAsync_(&p, s);
    if (r == CUDA_SUCCESS) r = c.toDevice() ? d_.cuMemcpy3DAsync_(&p, s) : d_.cuLaunchHostFunc_(s, &deliverRows, a);
    captured = r == CUDA_SUCCESS;
    return r;
  }
  // As a graph node: a child graph of the two (the driver copies it into the node).
  Status GraphAddHostCopyNode(Graph g, GraphNodes deps, HostRowsCopy c, uint64_t id, Created<GraphNode>& out) {
    CUDA_MEMCPY3D p;
    HostCopyArg* a = hostCopy(id, c, p);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    if (CUresult kept = keepWith(graph_(g), a); kept != CUDA_SUCCESS) return kept;
    CUDA_HOST_NODE_PARAMS hp{c.toDevice() ? &fetchRows : &deliverRows, a};
    CUgraph child = nullptr;
    if (CUresult r = d_.cuGraphCreate_(&child, 0); r != CUDA_SUCCESS) return r;
    CUgraphNode first = nullptr, second = nullptr;
    CUresult r = c.toDevice() ? d_.cuGraphAddHostNode_(&first, child, nullptr, 0, &hp)
                              : d_.cuGraphAddMemcpyNode_(&first, child, nullptr, 0, &p, ctx_);
    if (r == CUDA_SUCCESS)
      r = c.toDevice() ? d_.cuGraphAddMemcpyNode_(&second, child, &first, 1, &p, ctx_) : d_.cuGraphAddHostNode_(&second, child, &first, 1, &hp);
    auto d = nodes_(deps);
    Status st = r;
    if (r == CUDA_SUCCESS)
      st = addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddChildGraphNode_(n, graph_(g), d.data(), d.size(), child); });
    d_.cuGraphDestroy_(child);
    return st;
  }

  // User objects: the destructor is the client's host function `id`, run once when the driver drops the
  // last reference (on a thread of the driver's; it only tells the client, and calls no CUDA).
  Status UserObjectCreate(uint64_t id, NewRefs refs, Created<UserObject>& out) {
    auto arg = std::make_unique<HostFuncArg>(HostFuncArg{&callbacks_, id});
    CUuserObject obj = nullptr;
    CUresult r = d_.cuUserObjectCreate_(&obj, arg.get(), &hostFuncOnce, refs.count, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
    if (r == CUDA_SUCCESS) arg.release();  // the destructor frees it
    out = reinterpret_cast<uint64_t>(obj);
    return r;
  }
  static CUuserObject object_(const UserObject& o) { return reinterpret_cast<CUuserObject>(o.v); }
  Status UserObjectRetain(RefsAdded r) { return d_.cuUserObjectRetain_(object_(r.obj), r.count); }
  Status UserObjectRelease(RefsReleased r) { return d_.cuUserObjectRelease_(object_(r.obj), r.count); }
  Status GraphRetainUserObject(Graph g, RefsAdded r) {
    return d_.cuGraphRetainUserObject_(graph_(g), object_(r.obj), r.count, r.move ? CU_GRAPH_USER_OBJECT_MOVE : 0);
  }
  Status GraphReleaseUserObject(Graph g, RefsReleased r) { return d_.cuGraphReleaseUserObject_(graph_(g), object_(r.obj), r.count); }

  // Explicit graph construction. Node arguments are copied by the driver when a node is added or set.
  static CUgraph graph_(uint64_t g) { return reinterpret_cast<CUgraph>(g); }
  static std::vector<CUgraphNode> nodes_(const GraphNodes& n) {
    std::vector<CUgraphNode> out;
    for (uint64_t v : n.v) out.push_back(reinterpret_cast<CUgraphNode>(v));
    return out;
  }
  // A kernel node's parameters; its argument pointers stay valid until the next call.
  CUresult kernelParams(const KernelCall& c, CUDA_KERNEL_NODE_PARAMS& p) {
    const std::vector<uint32_t>* layout = nullptr;
    if (CUresult r = paramLayout(c.f, layout); r != CUDA_SUCCESS) return r;
    args_.clear();
    const auto* base = static_cast<const uint8_t*>(c.params.data);
    for (size_t i = 0; i + 1 < layout->size(); i += 2) {
      if (uint64_t{(*layout)[i]} + (*layout)[i + 1] > c.params.size) return CUDA_ERROR_INVALID_VALUE;
      args_.push_back(const_cast<uint8_t*>(base + (*layout)[i]));
    }
    p = CUDA_KERNEL_NODE_PARAMS{};
    if (CUresult r = function(c.f, p.func); r != CUDA_SUCCESS) return r;
    p.gridDimX = c.gx; p.gridDimY = c.gy; p.gridDimZ = c.gz;
    p.blockDimX = c.bx; p.blockDimY = c.by; p.blockDimZ = c.bz;
    p.sharedMemBytes = c.shared;
    p.kernelParams = args_.data();
    return CUDA_SUCCESS;
  }
  template <typename Add>
  Status addNode(Created<GraphNode>& out, Add add) {
    CUgraphNode node = nullptr;
    CUresult r = add(&node);
    out = reinterpret_cast<uint64_t>(node);
    return r;
  }
  Status GraphCreate(uint32_t flags, Created<Graph>& out) {
    CUgraph g = nullptr;
    CUresult r = d_.cuGraphCreate_(&g, flags);
    out = reinterpret_cast<uint64_t>(g);
    return r;
  }
  Status GraphAddEmptyNode(Graph g, GraphNodes deps, Created<GraphNode>& out) {
    auto d = nodes_(deps);
    return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddEmptyNode_(n, graph_(g), d.data(), d.size()); });
  }
  Status GraphAddKernelNode(Graph g, GraphNodes deps, KernelCall call, Created<GraphNode>& out) {
    CUDA_KERNEL_NODE_PARAMS p;
    if (CUresult r = kernelParams(call, p); r != CUDA_SUCCESS) return r;
    auto d = nodes_(deps);
    return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddKernelNode_(n, graph_(g), d.data(), d.size(), &p); });
  }
  static CUDA_MEMSET_NODE_PARAMS memsetParams(const DevFillRect& f, uint32_t value) {
    return CUDA_MEMSET_NODE_PARAMS{f.dst.ptr, f.dst.pitch, value, f.elem, f.dst.width / f.elem, f.dst.height};
  }
  static CUDA_MEMCPY3D memcpyParams(const DevCopyRect& c) {
    CUDA_MEMCPY3D p{};
    p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = c.src.ptr;
    p.srcPitch = c.src.pitch;
    p.dstDevice = c.dst.ptr;
    p.dstPitch = c.dst.pitch;
    p.WidthInBytes = c.dst.width;
    p.Height = c.dst.height;
    p.Depth = 1;
    return p;
  }
  Status GraphAddMemsetNode(Graph g, GraphNodes deps, DevFillRect f, uint32_t value, Created<GraphNode>& out) {
    CUDA_MEMSET_NODE_PARAMS p = memsetParams(f, value);
    auto d = nodes_(deps);
    return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddMemsetNode_(n, graph_(g), d.data(), d.size(), &p, ctx_); });
  }
  Status GraphAddMemcpyNode(Graph g, GraphNodes deps, DevCopyRect c, Created<GraphNode>& out) {
    CUDA_MEMCPY3D p = memcpyParams(c);
    auto d = nodes_(deps);
    return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddMemcpyNode_(n, graph_(g), d.data(), d.size(), &p, ctx_); });
  }
  // Graph memory (graph_memory.h): allocation nodes on the worker's device, readable and writable there.
  Status GraphAddMemAllocNode(Graph g, GraphNodes deps, GraphAllocBytes bytes, Created<GraphNode>& out, GraphAlloc& made) {
    CUDA_MEM_ALLOC_NODE_PARAMS p{};
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, dev_};
    p.bytesize = bytes.bytes;
    auto d = nodes_(deps);
    Status r = addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddMemAllocNode_(n, graph_(g), d.data(), d.size(), &p); });
    made = GraphAlloc{p.dptr, bytes.bytes};
    return r;
  }
  Status GraphAddMemFreeNode(Graph g, GraphNodes deps, GraphFreed ptr, Created<GraphNode>& out) {
    auto d = nodes_(deps);
    return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddMemFreeNode_(n, graph_(g), d.data(), d.size(), ptr.ptr); });
  }
  Status GraphMemNodeGetParams(Graph, GraphNode node, uint64_t& ptr, uint64_t& bytes) {
    CUgraphNodeType type;
    if (CUresult r = d_.cuGraphNodeGetType_(node_(node.v), &type); r != CUDA_SUCCESS) return r;
    bytes = 0;
    if (type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
      CUdeviceptr p = 0;
      CUresult r = d_.cuGraphMemFreeNodeGetParams_(node_(node.v), &p);
      ptr = p;
      return r;
    }
    if (type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEM_ALLOC_NODE_PARAMS p{};
    CUresult r = d_.cuGraphMemAllocNodeGetParams_(node_(node.v), &p);
    ptr = p.dptr, bytes = p.bytesize;
    return r;
  }
  Status DeviceGraphMemTrim() { return d_.cuDeviceGraphMemTrim_(dev_); }
  Status DeviceGraphMemGet(std::vector<uint64_t>& figures) {
    figures.assign(4, 0);
    for (int i = 0; i < 4; ++i) {
      cuuint64_t v = 0;
      auto attr = static_cast<CUgraphMem_attribute>(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT + i);
      if (CUresult r = d_.cuDeviceGetGraphMemAttribute_(dev_, attr, &v); r != CUDA_SUCCESS) return r;
      figures[static_cast<size_t>(i)] = v;
    }
    return CUDA_SUCCESS;
  }
  Status DeviceGraphMemResetHigh(uint32_t attr) {
    if (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) return CUDA_ERROR_INVALID_VALUE;
    cuuint64_t zero = 0;
    return d_.cuDeviceSetGraphMemAttribute_(dev_, static_cast<CUgraphMem_attribute>(attr), &zero);
  }
  uint64_t captureGraph(uint64_t stream) override {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph g = nullptr;
    if (d_.cuStreamGetCaptureInfo_(stream_(stream), &st, nullptr, &g, nullptr, nullptr, nullptr) != CUDA_SUCCESS) return 0;
    return st != CU_STREAM_CAPTURE_STATUS_NONE ? reinterpret_cast<uint64_t>(g) : 0;  // invalidated: until it ends
  }
  void graphMemory(uint64_t& used, uint64_t& reserved) override {
    cuuint64_t u = 0, r = 0;
    d_.cuDeviceGetGraphMemAttribute_(dev_, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &u);
    d_.cuDeviceGetGraphMemAttribute_(dev_, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &r);
    used = u, reserved = r;
  }
  Status GraphAddHostNode(Graph g, GraphNodes deps, uint64_t id, Created<GraphNode>& out) {
    CUDA_HOST_NODE_PARAMS p{&hostFunc, keepHostFunc(id)};
    auto d = nodes_(deps);
    return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddHostNode_(n, graph_(g), d.data(), d.size(), &p); });
  }
  Status GraphAddEventNode(Graph g, GraphNodes deps, Event e, uint32_t wait, Created<GraphNode>& out) {
    auto d = nodes_(deps);
    return addNode(out, [&](CUgraphNode* n) {
      return wait ? d_.cuGraphAddEventWaitNode_(n, graph_(g), d.data(), d.size(), event_(e))
                  : d_.cuGraphAddEventRecordNode_(n, graph_(g), d.data(), d.size(), event_(e));
    });
  }
  Status GraphAddChildGraphNode(Graph g, GraphNodes deps, ChildGraph child, Created<GraphNode>& out) {
    auto d = nodes_(deps);
    return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddChildGraphNode_(n, graph_(g), d.data(), d.size(), graph_(child.v)); });
  }
  Status GraphAddDependencies(Graph g, GraphEdges e) {
    auto f = nodes_(e.from), t = nodes_(e.to);
    return d_.cuGraphAddDependencies_(graph_(g), f.data(), t.data(), nullptr, f.size());
  }
  Status GraphDestroyNode(Graph, Released<GraphNode> node) { return d_.cuGraphDestroyNode_(reinterpret_cast<CUgraphNode>(node.v)); }
  Status GraphKernelNodeSetParams(Graph, GraphNode node, KernelCall call) {
    CUDA_KERNEL_NODE_PARAMS p;
    if (CUresult r = kernelParams(call, p); r != CUDA_SUCCESS) return r;
    return d_.cuGraphKernelNodeSetParams_(reinterpret_cast<CUgraphNode>(node.v), &p);
  }
  Status GraphExecKernelNodeSetParams(GraphExec exec, Graph, GraphNode node, KernelCall call) {
    CUDA_KERNEL_NODE_PARAMS p;
    if (CUresult r = kernelParams(call, p); r != CUDA_SUCCESS) return r;
    return d_.cuGraphExecKernelNodeSetParams_(reinterpret_cast<CUgraphExec>(exec.v), reinterpret_cast<CUgraphNode>(node.v), &p);
  }
  static CUgraphExec exec_(uint64_t e) { return reinterpret_cast<CUgraphExec>(e); }
  static CUgraphNode node_(uint64_t n) { return reinterpret_cast<CUgraphNode>(n); }
  // A batch memory-operation node: the operations as the driver takes them, for this worker's context.
  struct BatchMemOps {
    std::vector<CUstreamBatchMemOpParams> ops;
    CUDA_BATCH_MEM_OP_NODE_PARAMS params{};
  };
  BatchMemOps batchMemOps(const MemOps& m) {
    BatchMemOps b;
    b.ops.resize(m.count());
    for (size_t i = 0; i < m.count(); ++i) {
      CUstreamBatchMemOpParams& o = b.ops[i];
      o.operation = static_cast<CUstreamBatchMemOpType>(m.op(i));
      if (m.bytes(i) == 0) {
        o.flushRemoteWrites.flags = m.flags(i);  // a barrier's flags sit at the same place
        continue;
      }
      auto fill = [&](auto& w) {
        w.address = m.ptr(i);
        w.value64 = m.value(i);
        w.flags = m.flags(i);
      };
      if (m.op(i) == MemOps::kWait32 || m.op(i) == MemOps::kWait64) fill(o.waitValue);
      else fill(o.writeValue);
    }
    b.params = CUDA_BATCH_MEM_OP_NODE_PARAMS{ctx_, static_cast<unsigned>(b.ops.size()), b.ops.data(), 0};
    return b;
  }
  Status GraphAddBatchMemOpNode(Graph g, GraphNodes deps, MemOps m, Created<GraphNode>& out) {
    BatchMemOps b = batchMemOps(m);
    auto d = nodes_(deps);
    return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddBatchMemOpNode_(n, graph_(g), d.data(), d.size(), &b.params); });
  }
  Status GraphBatchMemOpNodeSetParams(Graph, GraphNode node, MemOps m) {
    BatchMemOps b = batchMemOps(m);
    return d_.cuGraphBatchMemOpNodeSetParams_(node_(node.v), &b.params);
  }
  Status GraphExecBatchMemOpNodeSetParams(GraphExec exec, Graph, GraphNode node, MemOps m) {
    BatchMemOps b = batchMemOps(m);
    return d_.cuGraphExecBatchMemOpNodeSetParams_(exec_(exec.v), node_(node.v), &b.params);
  }
  Status GraphExecMemsetNodeSetParams(GraphExec exec, Graph, GraphNode node, DevFillRect f, uint32_t value) {
    CUDA_MEMSET_NODE_PARAMS p = memsetParams(f, value);
    return d_.cuGraphExecMemsetNodeSetParams_(exec_(exec.v), node_(node.v), &p, ctx_);
  }
  Status GraphExecMemcpyNodeSetParams(GraphExec exec, Graph, GraphNode node, DevCopyRect c) {
    CUDA_MEMCPY3D p = memcpyParams(c);
    return d_.cuGraphExecMemcpyNodeSetParams_(exec_(exec.v), node_(node.v), &p, ctx_);
  }
  Status GraphExecHostNodeSetParams(GraphExec exec, Graph, GraphNode node, uint64_t id) {
    CUDA_HOST_NODE_PARAMS p{&hostFunc, keepHostFunc(id)};
    return d_.cuGraphExecHostNodeSetParams_(exec_(exec.v), node_(node.v), &p);
  }
  Status GraphExecUpdate(GraphExec exec, Graph g, uint32_t& result) {
    CUgraphExecUpdateResultInfo info{};
    CUresult r = d_.cuGraphExecUpdate_(reinterpret_cast<CUgraphExec>(exec.v), graph_(g), &info);
    result = info.result;
    return r;
  }

  Status GraphConditionalHandleCreate(Graph g, uint32_t initial, uint32_t flags, Created<Conditional>& out) {
    CUgraphConditionalHandle h = 0;
    CUresult r = d_.cuGraphConditionalHandleCreate_(&h, graph_(g), ctx_, initial, flags);
    out = h;
    return r;
  }
  Status GraphAddConditionalNode(Graph g, GraphNodes deps, Conditional c, uint32_t type, uint32_t size,
                                 Created<GraphNode>& out, Created<BodyGraphs>& bodies) {
    CUgraphNodeParams p{};
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional = CUDA_CONDITIONAL_NODE_PARAMS{c.v, static_cast<CUgraphConditionalNodeType>(type), size, nullptr, ctx_};
    auto d = nodes_(deps);
    Status r = addNode(out, [&](CUgraphNode* n) { return d_.cuGraphAddNode_(n, graph_(g), d.data(), nullptr, d.size(), &p); });
    for (uint32_t i = 0; r == CUDA_SUCCESS && i < size; ++i) bodies.v.push_back(reinterpret_cast<uint64_t>(p.conditional.phGraph_out[i]));
    return r;
  }
  Status GraphTopology(Graph g, Created<GraphNodes>& nodes, std::vector<uint32_t>& types, std::vector<uint64_t>& edges) {
    size_t count = 0, edge_count = 0;
    if (CUresult r = d_.cuGraphGetNodes_(graph_(g), nullptr, &count); r != CUDA_SUCCESS) return r;
    std::vector<CUgraphNode> all(count);
    if (CUresult r = d_.cuGraphGetNodes_(graph_(g), all.data(), &count); r != CUDA_SUCCESS) return r;
    for (CUgraphNode n : all) {
      CUgraphNodeType type{};
      if (CUresult r = d_.cuGraphNodeGetType_(n, &type); r != CUDA_SUCCESS) return r;
      nodes.v.push_back(reinterpret_cast<uint64_t>(n));
      types.push_back(type);
    }
    if (CUresult r = d_.cuGraphGetEdges_(graph_(g), nullptr, nullptr, nullptr, &edge_count); r != CUDA_SUCCESS) return r;
    std::vector<CUgraphNode> from(edge_count), to(edge_count);
    if (CUresult r = d_.cuGraphGetEdges_(graph_(g), from.data(), to.data(), nullptr, &edge_count); r != CUDA_SUCCESS) return r;
    for (size_t i = 0; i < edge_count; ++i) {
      edges.push_back(reinterpret_cast<uint64_t>(from[i]));
      edges.push_back(reinterpret_cast<uint64_t>(to[i]));
    }
    return CUDA_SUCCESS;
  }
  Status GraphKernelNodeSetAttribute(Graph, GraphNode node, LaunchAttrs attr) {
    if (attr.data.size != sizeof(CUlaunchAttribute)) return CUDA_ERROR_INVALID_VALUE;
    CUlaunchAttribute a;
    std::memcpy(&a, attr.data.data, sizeof a);
    return d_.cuGraphKernelNodeSetAttribute_(node_(node.v), a.id, &a.value);
  }
  Status GraphKernelNodeGetAttribute(Graph, GraphNode node, uint32_t id, std::vector<uint8_t>& value) {
    CUlaunchAttributeValue v{};
    CUresult r = d_.cuGraphKernelNodeGetAttribute_(node_(node.v), static_cast<CUlaunchAttributeID>(id), &v);
    const auto* bytes = reinterpret_cast<const uint8_t*>(&v);
    if (r == CUDA_SUCCESS) value.assign(bytes, bytes + sizeof v);
    return r;
  }
  // A captured node's parameters, for a client that reads them back. A kernel node names the handle the
  // client launched with: the CUkernel whose function the worker launched, when it launched one.
  Status GraphKernelNodeGetParams(Graph, GraphNode node, Launchable& f, uint32_t& is_kernel, std::vector<uint32_t>& shape,
                                  std::vector<uint8_t>& args) {
    CUDA_KERNEL_NODE_PARAMS p{};
    if (CUresult r = d_.cuGraphKernelNodeGetParams_(node_(node.v), &p); r != CUDA_SUCCESS) return r;
    f = launchableOf(p);
    is_kernel = f.is_kernel;
    const std::vector<uint32_t>* layout = nullptr;
    if (CUresult r = paramLayout(f, layout); r != CUDA_SUCCESS) return r;
    if (!layout->empty() && !p.kernelParams) return CUDA_ERROR_NOT_SUPPORTED;  // the worker launches with kernelParams alone
    args.assign(layout->empty() ? 0 : (*layout)[layout->size() - 2] + layout->back(), 0);
    for (size_t i = 0; i + 1 < layout->size(); i += 2) std::memcpy(args.data() + (*layout)[i], p.kernelParams[i / 2], (*layout)[i + 1]);
    shape = {p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ, p.sharedMemBytes};
    return CUDA_SUCCESS;
  }
  Status GraphMemsetNodeGetParams(Graph, GraphNode node, DevFillRect& f, uint32_t& value) {
    CUDA_MEMSET_NODE_PARAMS p{};
    if (CUresult r = d_.cuGraphMemsetNodeGetParams_(node_(node.v), &p); r != CUDA_SUCCESS) return r;
    uint64_t width = uint64_t{p.width} * p.elementSize;
    f = DevFillRect{DevRect{p.dst, p.height > 1 ? p.pitch : width, width, p.height}, p.elementSize};
    value = p.value;
    return CUDA_SUCCESS;
  }
  // Only a copy between device memory: the worker's captured host copies go through its own staging memory,
  // and page-locked memory it shares with a client on its host is host memory too. A unified end (as the
  // driver may record a captured cuMemcpyDtoDAsync's) is device memory when the driver says so.
  bool deviceEnd(CUmemorytype t, CUdeviceptr ptr) {
    if (t != CU_MEMORYTYPE_UNIFIED) return t == CU_MEMORYTYPE_DEVICE;
    unsigned type = 0;
    return d_.cuPointerGetAttribute_(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) == CUDA_SUCCESS && type == CU_MEMORYTYPE_DEVICE;
  }
  Status GraphMemcpyNodeGetParams(Graph, GraphNode node, DevCopyRect& c) {
    CUDA_MEMCPY3D p{};
    if (CUresult r = d_.cuGraphMemcpyNodeGetParams_(node_(node.v), &p); r != CUDA_SUCCESS) return r;
    if (!deviceEnd(p.srcMemoryType, p.srcDevice) || !deviceEnd(p.dstMemoryType, p.dstDevice) || p.Depth > 1 || p.srcZ || p.dstZ)
      return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t height = p.Height ? p.Height : 1;
    c.dst = DevRect{p.dstDevice + p.dstY * p.dstPitch + p.dstXInBytes, p.dstPitch ? p.dstPitch : p.WidthInBytes, p.WidthInBytes, height};
    c.src = DevRect{p.srcDevice + p.srcY * p.srcPitch + p.srcXInBytes, p.srcPitch ? p.srcPitch : p.WidthInBytes, p.WidthInBytes, height};
    return CUDA_SUCCESS;
  }
  Status GraphEventNodeGetEvent(Graph, GraphNode node, uint32_t wait, Event& out) {
    CUevent e = nullptr;
    CUresult r = wait ? d_.cuGraphEventWaitNodeGetEvent_(node_(node.v), &e) : d_.cuGraphEventRecordNodeGetEvent_(node_(node.v), &e);
    out = reinterpret_cast<uint64_t>(e);
    return r;
  }
  // The worker's own host nodes (a captured host copy's fetch or delivery) name no function of the client's.
  Status GraphHostNodeGetParams(Graph, GraphNode node, uint64_t& id) {
    CUDA_HOST_NODE_PARAMS p{};
    if (CUresult r = d_.cuGraphHostNodeGetParams_(node_(node.v), &p); r != CUDA_SUCCESS) return r;
    if (p.fn != &hostFunc || !p.userData) return CUDA_ERROR_NOT_SUPPORTED;
    id = static_cast<const HostFuncArg*>(p.userData)->id;
    return CUDA_SUCCESS;
  }
  Status StreamSetAttribute(Stream stream, LaunchAttrs attr) {
    if (attr.data.size != sizeof(CUlaunchAttribute)) return CUDA_ERROR_INVALID_VALUE;
    CUlaunchAttribute a;
    std::memcpy(&a, attr.data.data, sizeof a);
    return d_.cuStreamSetAttribute_(stream_(stream), a.id, &a.value);
  }
  Status StreamGetAttribute(Stream stream, uint32_t id, std::vector<uint8_t>& value) {
    CUlaunchAttributeValue v{};
    CUresult r = d_.cuStreamGetAttribute_(stream_(stream), static_cast<CUstreamAttrID>(id), &v);
    const auto* bytes = reinterpret_cast<const uint8_t*>(&v);
    if (r == CUDA_SUCCESS) value.assign(bytes, bytes + sizeof v);
    return r;
  }
  Status StreamCopyAttributes(Stream dst, Stream src) { return d_.cuStreamCopyAttributes_(stream_(dst), stream_(src)); }
  Status GraphKernelNodeCopyAttributes(Graph, GraphNode dst, Graph, GraphNode src) {
    return d_.cuGraphKernelNodeCopyAttributes_(node_(dst.v), node_(src.v));
  }
  Status GraphChildGraphNodeGetGraph(Graph, GraphNode node, Created<BodyGraphs>& graph) {
    CUgraph child = nullptr;
    CUresult r = d_.cuGraphChildGraphNodeGetGraph_(node_(node.v), &child);
    if (r == CUDA_SUCCESS) graph.v = {reinterpret_cast<uint64_t>(child)};
    return r;
  }
  Status GraphNodeFindInClone(Graph, GraphNode node, Graph clone, Created<GraphNode>& out) {
    return addNode(out, [&](CUgraphNode* n) { return d_.cuGraphNodeFindInClone_(n, node_(node.v), graph_(clone)); });
  }
  Status GraphRemoveDependencies(Graph g, GraphEdges e) {
    auto f = nodes_(e.from), t = nodes_(e.to);
    return d_.cuGraphRemoveDependencies_(graph_(g), f.data(), t.data(), nullptr, f.size());
  }
  Status GraphExecNodeSetEnabled(GraphExec exec, Graph, GraphNode node, uint32_t enabled) {
    return d_.cuGraphNodeSetEnabled_(exec_(exec.v), node_(node.v), enabled);
  }
  Status GraphExecNodeGetEnabled(GraphExec exec, Graph, GraphNode node, uint32_t& enabled) {
    unsigned int on = 0;
    CUresult r = d_.cuGraphNodeGetEnabled_(exec_(exec.v), node_(node.v), &on);
    enabled = on;
    return r;
  }
  Status GraphExecChildGraphNodeSetParams(GraphExec exec, Graph, GraphNode node, ChildGraph child) {
    return d_.cuGraphExecChildGraphNodeSetParams_(exec_(exec.v), node_(node.v), graph_(child.v));
  }
  Status GraphExecEventNodeSetEvent(GraphExec exec, Graph, GraphNode node, Event e, uint32_t wait) {
    return wait ? d_.cuGraphExecEventWaitNodeSetEvent_(exec_(exec.v), node_(node.v), event_(e))
                : d_.cuGraphExecEventRecordNodeSetEvent_(exec_(exec.v), node_(node.v), event_(e));
  }
  Status GraphEventNodeSetEvent(Graph, GraphNode node, Event e, uint32_t wait) {
    return wait ? d_.cuGraphEventWaitNodeSetEvent_(node_(node.v), event_(e)) : d_.cuGraphEventRecordNodeSetEvent_(node_(node.v), event_(e));
  }
  Status GraphMemsetNodeSetParams(Graph, GraphNode node, DevFillRect f, uint32_t value) {
    CUDA_MEMSET_NODE_PARAMS p = memsetParams(f, value);
    return d_.cuGraphMemsetNodeSetParams_(node_(node.v), &p);
  }
  Status GraphMemcpyNodeSetParams(Graph, GraphNode node, DevCopyRect c) {
    CUDA_MEMCPY3D p = memcpyParams(c);
    return d_.cuGraphMemcpyNodeSetParams_(node_(node.v), &p);
  }
  Status GraphHostNodeSetParams(Graph, GraphNode node, uint64_t id) {
    CUDA_HOST_NODE_PARAMS p{&hostFunc, keepHostFunc(id)};
    return d_.cuGraphHostNodeSetParams_(node_(node.v), &p);
  }

  // IPC: the driver's own handles, filed in the host's registry under a key the client's handle names.
  Status IpcGetMemHandle(AllocBase p, std::vector<uint8_t>& handle) {
    CUipcMemHandle h;
    if (CUresult r = d_.cuIpcGetMemHandle_(&h, p.ptr); r != CUDA_SUCCESS) return r;
    size_t size = 0;
    CUdeviceptr base = 0;
    if (CUresult r = d_.cuMemGetAddressRange_(&base, &size, p.ptr); r != CUDA_SUCCESS) return r;
    std::vector<uint8_t> record(sizeof h + sizeof(uint64_t));
    uint64_t bytes = size;
    std::memcpy(record.data(), &h, sizeof h);
    std::memcpy(record.data() + sizeof h, &bytes, sizeof bytes);
    return publishMemory(p.ptr, record, handle);
  }
  Status IpcOpenMemHandle(std::vector<uint8_t> handle, uint32_t flags, IpcMapping& out) {
    std::vector<uint8_t> record;
    IpcRegistry::RecordFile hold;
    if (Status st = ipc_.lookupHeld(IpcRegistry::Kind::kMemory, handle, record, hold); st != CUDA_SUCCESS) return st;
    CUipcMemHandle h;
    uint64_t bytes = 0;
    if (record.size() != sizeof h + sizeof bytes) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(&h, record.data(), sizeof h);
    std::memcpy(&bytes, record.data() + sizeof h, sizeof bytes);
    CUdeviceptr p = 0;
    CUresult r = d_.cuIpcOpenMemHandle_(&p, h, flags);
    out = IpcMapping{p, bytes};
    if (r == CUDA_SUCCESS) imports_.keep(Shared::kAllocation, p, std::move(hold));
    return r;
  }
  Status IpcCloseMemHandle(IpcMapped p) {
    imports_.letGo(Shared::kAllocation, p.ptr);
    return d_.cuIpcCloseMemHandle_(p.ptr);
  }
  Status IpcGetEventHandle(Event e, std::vector<uint8_t>& handle) {
    CUipcEventHandle h;
    if (CUresult r = d_.cuIpcGetEventHandle_(&h, event_(e)); r != CUDA_SUCCESS) return r;
    return ipc_.publish(IpcRegistry::Kind::kEvent, std::vector<uint8_t>(h.reserved, h.reserved + sizeof h.reserved), handle);
  }
  Status IpcOpenEventHandle(std::vector<uint8_t> handle, Created<Event>& out) {
    std::vector<uint8_t> record;
    if (Status st = ipc_.lookup(IpcRegistry::Kind::kEvent, handle, record); st != CUDA_SUCCESS) return st;
    CUipcEventHandle h;
    if (record.size() != sizeof h.reserved) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(h.reserved, record.data(), sizeof h.reserved);
    CUevent e = nullptr;
    CUresult r = d_.cuIpcOpenEventHandle_(&e, h);
    out = reinterpret_cast<uint64_t>(e);
    return r;
  }

  // A context reset: the worker's own buffers in the context go first, then the driver resets it.
  // The primary context, retained on the first call that needs it (backend.h) and current on the
  // dispatcher's thread, the only one that calls the driver with it.
  Status openContext() override {
    if (ctx_) return CUDA_SUCCESS;
    CUcontext ctx = nullptr;
    CUresult r = d_.cuDevicePrimaryCtxRetain_(&ctx, dev_);
    if (r != CUDA_SUCCESS) return r;
    if ((r = d_.cuCtxSetCurrent_(ctx)) != CUDA_SUCCESS) {
      d_.cuDevicePrimaryCtxRelease_(dev_);
      return r;
    }
    ctx_ = ctx;
    retains_ = 1;
    spdlog::debug("primary context of device {} made, on the client's first call that needs one", dev_);
    return CUDA_SUCCESS;
  }

  Status CtxReset(ResetAll) {
    CUresult r = d_.cuCtxSynchronize_();
    if (r != CUDA_SUCCESS) return r;
    imports_.clear();  // (its exports were ended by the worker: import_holds.h)
    releaseBuffers();
    for (auto& [handle, link] : links_) d_.cuLinkDestroy_(link->state);
    links_.clear();
    layouts_.clear();
    kernel_of_function_.clear();
    {
      std::lock_guard lock(host_copy_blocks_->mu);  // the reset frees every staging block, idle or held by a graph
      host_copy_blocks_->idle.clear();
      ++host_copy_blocks_->context;
    }
    for (CUgreenCtx g : greens_) d_.cuGreenCtxDestroy_(g);  // (they hold the primary context)
    greens_.clear();
    if ((r = d_.cuDevicePrimaryCtxReset_(dev_)) != CUDA_SUCCESS) return r;
    // A reset leaves the primary context inactive, and making its old handle current does not bring it
    // back: every later call would fail with CUDA_ERROR_CONTEXT_IS_DESTROYED. Retaining it again does,
    // as NVIDIA's runtime does after cudaDeviceReset.
    if ((r = d_.cuDevicePrimaryCtxRetain_(&ctx_, dev_)) != CUDA_SUCCESS) return r;
    ++retains_;
    if ((r = d_.cuCtxSetCurrent_(ctx_)) != CUDA_SUCCESS) return r;
    host_pool_.repin([this](uint64_t p, uint64_t n) { return pinHost(p, n); });  // the client's host memory stays
    return CUDA_SUCCESS;
  }

  // The shared pool's pages: registered for every context, and mapped for kernels at the address the
  // client holds (what CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM promises); where the
  // device would see them elsewhere they are refused, and the client keeps the memory to itself.
  Status pinHost(uint64_t ptr, uint64_t bytes) override {
    void* h = reinterpret_cast<void*>(ptr);
    CUresult r = d_.cuMemHostRegister_(h, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r != CUDA_SUCCESS) return r;
    CUdeviceptr d = 0;
    if (d_.cuMemHostGetDevicePointer_(&d, h, 0) == CUDA_SUCCESS && d == ptr) return CUDA_SUCCESS;
    d_.cuMemHostUnregister_(h);
    spdlog::warn("host pool: the device maps registered host memory at another address; shared page-locked memory is off");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  Status unpinHost(uint64_t ptr) override { return d_.cuMemHostUnregister_(reinterpret_cast<void*>(ptr)); }

  // Physical memory shared with other processes (shareable_handles.h): the driver's own descriptors.
  Status exportPhysical(uint64_t h, int& fd) override {
    return d_.cuMemExportToShareableHandle_(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  }
  Status exportPool(uint64_t pool, int& fd) override {
    return d_.cuMemPoolExportToShareableHandle_(&fd, reinterpret_cast<CUmemoryPool>(pool), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  }
  Status importPool(int fd, uint64_t& pool) override {
    CUmemoryPool imported = nullptr;
    CUresult r = d_.cuMemPoolImportFromShareableHandle_(&imported, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    pool = reinterpret_cast<uint64_t>(imported);
    return r;
  }
  // A pool allocation's record: the driver's export data, then the allocation's size.
  Status exportPoolPointer(uint64_t ptr, std::vector<uint8_t>& record) override {
    CUmemPoolPtrExportData data{};
    if (CUresult r = d_.cuMemPoolExportPointer_(&data, ptr); r != CUDA_SUCCESS) return r;
    const DeviceRange* range = memory_ ? memory_->allocationAt(ptr) : nullptr;
    uint64_t bytes = range ? range->bytes : 0;
    record.resize(sizeof data + sizeof bytes);
    std::memcpy(record.data(), &data, sizeof data);
    std::memcpy(record.data() + sizeof data, &bytes, sizeof bytes);
    return CUDA_SUCCESS;
  }
  Status importPoolPointer(uint64_t pool, const std::vector<uint8_t>& record, IpcMapping& out) override {
    CUmemPoolPtrExportData data{};
    uint64_t bytes = 0;
    if (record.size() != sizeof data + sizeof bytes) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(&data, record.data(), sizeof data);
    std::memcpy(&bytes, record.data() + sizeof data, sizeof bytes);
    CUdeviceptr p = 0;
    CUresult r = d_.cuMemPoolImportPointer_(&p, reinterpret_cast<CUmemoryPool>(pool), &data);
    out = IpcMapping{p, bytes};
    return r;
  }
  Status freeImportedPointer(uint64_t ptr, uint64_t stream) override { return d_.cuMemFreeAsync_(ptr, stream_(stream)); }
  Status importPhysical(int fd, uint64_t&, uint64_t& h) override {
    CUmemGenericAllocationHandle imported = 0;
    CUresult r = d_.cuMemImportFromShareableHandle_(&imported, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    h = imported;
    return r;
  }

  Status MemAllocAsync(AllocBytes bytes, Stream stream, NewAlloc& out) {
    CUdeviceptr p = 0;
    CUresult r = d_.cuMemAllocAsync_(&p, bytes, stream_(stream));
    out = NewAlloc{p, bytes};
    return r;
  }
  Status MemAllocFromPoolAsync(AllocBytes bytes, MemPool pool, Stream stream, NewAlloc& out) {
    CUdeviceptr p = 0;
    CUresult r = d_.cuMemAllocFromPoolAsync_(&p, bytes, reinterpret_cast<CUmemoryPool>(pool.v), stream_(stream));
    out = NewAlloc{p, bytes};
    return r;
  }
  Status MemPoolCreate(uint32_t type, uint32_t handles, uint64_t max_size, uint32_t usage, Created<MemPool>& out) {
    CUmemPoolProps props{};
    props.allocType = static_cast<CUmemAllocationType>(type);
    props.handleTypes = static_cast<CUmemAllocationHandleType>(handles);
    props.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, dev_};  // the worker's device, whatever the client numbered it
    props.maxSize = max_size;
    props.usage = static_cast<unsigned short>(usage);
    CUmemoryPool pool = nullptr;
    CUresult r = d_.cuMemPoolCreate_(&pool, &props);
    out = reinterpret_cast<uint64_t>(pool);
    return r;
  }
  Status DeviceGetMemPool(uint32_t which, Created<MemPool>& out) {
    if (which > 1) return CUDA_ERROR_INVALID_VALUE;
    CUmemoryPool pool = nullptr;
    CUresult r = which == 1 ? d_.cuDeviceGetDefaultMemPool_(&pool, dev_) : d_.cuDeviceGetMemPool_(&pool, dev_);
    out = reinterpret_cast<uint64_t>(pool);
    return r;
  }
  Status DeviceSetMemPool(MemPool pool) { return d_.cuDeviceSetMemPool_(dev_, reinterpret_cast<CUmemoryPool>(pool.v)); }
  // The reuse flags are ints; the sizes and counters cuuint64_t (cuda.h, CUmemPool_attribute).
  static bool intPoolAttribute(uint32_t attr) { return attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES; }
  Status MemPoolSetAttribute(MemPool pool, PoolAttribute a) {
    int i = static_cast<int>(a.value);
    cuuint64_t u = a.value;
    void* v = intPoolAttribute(a.attr) ? static_cast<void*>(&i) : static_cast<void*>(&u);
    return d_.cuMemPoolSetAttribute_(reinterpret_cast<CUmemoryPool>(pool.v), static_cast<CUmemPool_attribute>(a.attr), v);
  }
  Status MemPoolGetAttribute(MemPool pool, uint32_t attr, uint64_t& value) {
    if (attr < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || attr > CU_MEMPOOL_ATTR_USED_MEM_HIGH) return CUDA_ERROR_INVALID_VALUE;
    int i = 0;
    cuuint64_t u = 0;
    void* v = intPoolAttribute(attr) ? static_cast<void*>(&i) : static_cast<void*>(&u);
    CUresult r = d_.cuMemPoolGetAttribute_(reinterpret_cast<CUmemoryPool>(pool.v), static_cast<CUmemPool_attribute>(attr), v);
    value = intPoolAttribute(attr) ? static_cast<uint64_t>(i) : u;
    return r;
  }

  Status MemAlloc(AllocBytes bytes, NewAlloc& out) {
    CUdeviceptr p = 0;
    CUresult r = d_.cuMemAlloc_(&p, bytes);
    if (r == CUDA_SUCCESS) out = NewAlloc{p, bytes};
    return r;
  }
  Status MemGetInfo(MemView& m) {
    size_t f = 0, t = 0;
    CUresult r = d_.cuMemGetInfo_(&f, &t);
    m = MemView{f, t};  // the worker lowers it to the lease's view
    return r;
  }
  Status PointerGetBase(DevAddress, RangeOf&) { return CUDA_SUCCESS; }  // answered by the worker's table
  Status MemcpyHtoD(DevWrite w, Stream stream, uint32_t async) {
    uint64_t dst = w.ptr;
    Blob data = w.data;
    // A captured copy would read the frame buffer at replay, long after it was reused.
    if (capturing(stream)) return refuseInCapture(stream, "a host-to-device copy");
    if (!async) return d_.cuMemcpyHtoD_(dst, data.data, data.size);
    // From a page-locked slot the copy runs asynchronously; the slot's event keeps it from being reused
    // before the copy has read it. (From pageable memory the driver stages the bytes before returning.)
    CUresult r = d_.cuMemcpyHtoDAsync_(dst, data.data, data.size, stream_(stream));
    return r != CUDA_SUCCESS ? r : holdSlot(data, stream);
  }
  Status MemAllocPitch(PitchedAlloc a, NewAlloc& out, uint64_t& pitch) {
    CUdeviceptr p = 0;
    size_t chosen = 0;
    CUresult r = d_.cuMemAllocPitch_(&p, &chosen, a.width, a.height, a.elem);
    out = NewAlloc{p, uint64_t{chosen} * a.height};
    pitch = chosen;
    return r;
  }
  Status Memset2D(DevFillRect f, uint32_t value, Stream stream, uint32_t async) {
    const DevRect& r = f.dst;
    CUstream s = stream_(stream);
    size_t n = r.width / f.elem;
    switch (f.elem) {
      case 1: return async ? d_.cuMemsetD2D8Async_(r.ptr, r.pitch, static_cast<unsigned char>(value), n, r.height, s) : d_.cuMemsetD2D8_(r.ptr, r.pitch, static_cast<unsigned char>(value), n, r.height);
      case 2: return async ? d_.cuMemsetD2D16Async_(r.ptr, r.pitch, static_cast<unsigned short>(value), n, r.height, s) : d_.cuMemsetD2D16_(r.ptr, r.pitch, static_cast<unsigned short>(value), n, r.height);
      default: return async ? d_.cuMemsetD2D32Async_(r.ptr, r.pitch, value, n, r.height, s) : d_.cuMemsetD2D32_(r.ptr, r.pitch, value, n, r.height);
    }
  }
  Status MemcpyHtoD2D(DevWriteRect w, Stream stream, uint32_t async) {
    if (capturing(stream)) return refuseInCapture(stream, "a 2D host-to-device copy");
    CUDA_MEMCPY2D c = copy2D(w.dst.width, w.dst.height);
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = w.data.data;
    c.srcPitch = w.dst.width;
    toDevice(c, w.dst);
    if (!async) return d_.cuMemcpy2D_(&c);
    CUresult r = d_.cuMemcpy2DAsync_(&c, stream_(stream));
    return r != CUDA_SUCCESS ? r : holdSlot(w.data, stream);
  }
  Status MemcpyDtoH2D(DevRect src, Stream stream, std::vector<uint8_t>& rows) {
    if (capturing(stream)) return refuseInCapture(stream, "a 2D device-to-host copy");
    rows.resize(src.width * src.height);
    CUDA_MEMCPY2D c = copy2D(src.width, src.height);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = src.ptr;
    c.srcPitch = src.pitch;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = rows.data();
    c.dstPitch = src.width;
    CUresult r = d_.cuMemcpy2DAsync_(&c, stream_(stream));
    return r != CUDA_SUCCESS ? r : d_.cuStreamSynchronize_(stream_(stream));
  }
  Status MemcpyDtoD2D(DevCopyRect cr, Stream stream, uint32_t async) {
    CUDA_MEMCPY2D c = copy2D(cr.dst.width, cr.dst.height);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = cr.src.ptr;
    c.srcPitch = cr.src.pitch;
    toDevice(c, cr.dst);
    return async ? d_.cuMemcpy2DAsync_(&c, stream_(stream)) : d_.cuMemcpy2D_(&c);
  }
  // CUDA arrays: each copy is one slice's rectangle (request_checks.cpp checked it against the array).
  static CUDA_ARRAY3D_DESCRIPTOR descriptor(const ArrayShape& a) {
    return CUDA_ARRAY3D_DESCRIPTOR{a.width, a.height, a.depth, static_cast<CUarray_format>(a.format), a.channels, a.flags};
  }
  Status ArrayCreate(ArrayShape a, Created<Array>& out) {
    CUDA_ARRAY3D_DESCRIPTOR d = descriptor(a);
    CUarray array = nullptr;
    CUresult r = d_.cuArray3DCreate_(&array, &d);
    out = reinterpret_cast<uint64_t>(array);
    return r;
  }
  Status ArrayDestroy(Released<Array> a) { return d_.cuArrayDestroy_(reinterpret_cast<CUarray>(a.v)); }
  Status MipmappedArrayCreate(MipmapShape m, Created<MipmappedArray>& out) {
    CUDA_ARRAY3D_DESCRIPTOR d = descriptor(m.base);
    CUmipmappedArray mipmap = nullptr;
    CUresult r = d_.cuMipmappedArrayCreate_(&mipmap, &d, m.levels);
    out = reinterpret_cast<uint64_t>(mipmap);
    return r;
  }
  Status MipmappedArrayGetLevel(MipmapLevel l, Created<Array>& out) {
    CUarray level = nullptr;
    CUresult r = d_.cuMipmappedArrayGetLevel_(&level, reinterpret_cast<CUmipmappedArray>(l.mipmap.v), l.level);
    out = reinterpret_cast<uint64_t>(level);
    return r;
  }
  Status MipmappedArrayDestroy(Released<MipmappedArray> m) { return d_.cuMipmappedArrayDestroy_(reinterpret_cast<CUmipmappedArray>(m.v)); }
  Status MemcpyHtoA2D(ArrayWrite w, Stream stream, uint32_t async) {
    if (capturing(stream)) return refuseInCapture(stream, "a host-to-array copy");
    CUDA_MEMCPY3D c = slice(w.dst.width, w.dst.height);
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = w.data.data;
    c.srcPitch = w.dst.width;
    toArray(c, w.dst);
    if (!async) return d_.cuMemcpy3D_(&c);
    CUresult r = d_.cuMemcpy3DAsync_(&c, stream_(stream));
    return r != CUDA_SUCCESS ? r : holdSlot(w.data, stream);
  }
  Status MemcpyAtoH2D(ArrayRect src, Stream stream, std::vector<uint8_t>& rows) {
    if (capturing(stream)) return refuseInCapture(stream, "an array-to-host copy");
    rows.resize(src.width * src.height);
    CUDA_MEMCPY3D c = slice(src.width, src.height);
    fromArray(c, src);
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = rows.data();
    c.dstPitch = src.width;
    CUresult r = d_.cuMemcpy3DAsync_(&c, stream_(stream));
    return r != CUDA_SUCCESS ? r : d_.cuStreamSynchronize_(stream_(stream));
  }
  Status MemcpyDtoA2D(ArrayDevCopy dc, Stream stream, uint32_t async) {
    CUDA_MEMCPY3D c = slice(dc.array.width, dc.array.height);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = dc.device.ptr;
    c.srcPitch = dc.device.pitch;
    toArray(c, dc.array);
    return async ? d_.cuMemcpy3DAsync_(&c, stream_(stream)) : d_.cuMemcpy3D_(&c);
  }
  Status MemcpyAtoD2D(ArrayDevCopy dc, Stream stream, uint32_t async) {
    CUDA_MEMCPY3D c = slice(dc.array.width, dc.array.height);
    fromArray(c, dc.array);
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = dc.device.ptr;
    c.dstPitch = dc.device.pitch;
    return async ? d_.cuMemcpy3DAsync_(&c, stream_(stream)) : d_.cuMemcpy3D_(&c);
  }
  Status MemcpyAtoA2D(ArrayCopy ac, Stream stream, uint32_t async) {
    CUDA_MEMCPY3D c = slice(ac.dst.width, ac.dst.height);
    fromArray(c, ac.src);
    toArray(c, ac.dst);
    return async ? d_.cuMemcpy3DAsync_(&c, stream_(stream)) : d_.cuMemcpy3D_(&c);
  }
  // Texture and surface objects: the resource as the driver takes it; the descriptors as the client sent them.
  static CUDA_RESOURCE_DESC resource(const TexResource& r) {
    CUDA_RESOURCE_DESC d{};
    d.resType = static_cast<CUresourcetype>(r.type);
    if (r.type == CU_RESOURCE_TYPE_ARRAY) {
      d.res.array.hArray = reinterpret_cast<CUarray>(r.array.v);
    } else if (r.type == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
      d.res.mipmap.hMipmappedArray = reinterpret_cast<CUmipmappedArray>(r.mipmap.v);
    } else if (r.type == CU_RESOURCE_TYPE_LINEAR) {
      d.res.linear = {r.ptr, static_cast<CUarray_format>(r.format), r.channels, r.bytes};
    } else {
      d.res.pitch2D = {r.ptr, static_cast<CUarray_format>(r.format), r.channels, r.width, r.height, r.pitch};
    }
    return d;
  }
  Status TexObjectCreate(TexResource r, TexDescs descs, Created<TexObject>& out) {
    static_assert(sizeof(CUDA_TEXTURE_DESC) == TexDescs::kTextureBytes && sizeof(CUDA_RESOURCE_VIEW_DESC) == TexDescs::kViewBytes);
    CUDA_RESOURCE_DESC res = resource(r);
    CUDA_TEXTURE_DESC tex;
    CUDA_RESOURCE_VIEW_DESC view;
    std::memcpy(&tex, descs.texture.data(), sizeof tex);
    if (!descs.view.empty()) std::memcpy(&view, descs.view.data(), sizeof view);
    CUtexObject t = 0;
    CUresult st = d_.cuTexObjectCreate_(&t, &res, &tex, descs.view.empty() ? nullptr : &view);
    out = t;
    return st;
  }
  Status TexObjectDestroy(Released<TexObject> t) { return d_.cuTexObjectDestroy_(t.v); }
  Status SurfObjectCreate(TexResource r, Created<SurfObject>& out) {
    CUDA_RESOURCE_DESC res = resource(r);
    CUsurfObject sobj = 0;
    CUresult st = d_.cuSurfObjectCreate_(&sobj, &res);
    out = sobj;
    return st;
  }
  Status SurfObjectDestroy(Released<SurfObject> sobj) { return d_.cuSurfObjectDestroy_(sobj.v); }
  Status MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) override {
    if (capturing(stream)) return refuseInCapture(stream, "a device-to-host copy");
    if (stream == 0) return d_.cuMemcpyDtoH_(dst, src, bytes);
    CUresult r = d_.cuMemcpyDtoHAsync_(dst, src, bytes, stream_(stream));
    return r != CUDA_SUCCESS ? r : d_.cuStreamSynchronize_(stream_(stream));
  }
  Status MemcpyDtoD(DevCopy c, Stream stream, uint32_t async) {
    // Unified addressing: either end may be the client's page-locked memory in the shared pool.
    return async ? d_.cuMemcpyAsync_(c.dst, c.src, c.bytes, stream_(stream)) : d_.cuMemcpy_(c.dst, c.src, c.bytes);
  }
  Status Memset(DevFill f, uint32_t value, Stream stream, uint32_t async) {
    CUstream s = stream_(stream);
    uint64_t dst = f.ptr, count = f.count;
    switch (f.elem) {
      case 1: return async ? d_.cuMemsetD8Async_(dst, static_cast<unsigned char>(value), count, s) : d_.cuMemsetD8_(dst, static_cast<unsigned char>(value), count);
      case 2: return async ? d_.cuMemsetD16Async_(dst, static_cast<unsigned short>(value), count, s) : d_.cuMemsetD16_(dst, static_cast<unsigned short>(value), count);
      default: return async ? d_.cuMemsetD32Async_(dst, value, count, s) : d_.cuMemsetD32_(dst, value, count);
    }
  }
  Status ModuleLoad(Blob image, uint32_t kind, Created<ModuleRef>& out) {
    if (kind > 1 || image.size == 0) return CUDA_ERROR_INVALID_VALUE;
    out.kind = kind;
    // The driver reads the image through its own headers: refuse one whose headers claim more than
    // arrived, and hand it a private, padded copy.
    uint64_t need = proto::moduleImageSize(image.data, image.size);
    if (need == 0 || need > image.size) return CUDA_ERROR_INVALID_IMAGE;
    std::vector<uint8_t> copy(static_cast<const uint8_t*>(image.data), static_cast<const uint8_t*>(image.data) + image.size);
    copy.resize(copy.size() + 64, 0);
    if (kind == 0) {
      CUmodule m = nullptr;
      CUresult r = d_.cuModuleLoadData_(&m, copy.data());
      out.handle = reinterpret_cast<uint64_t>(m);
      return r;
    }
    CUlibrary l = nullptr;
    CUresult r = d_.cuLibraryLoadData_(&l, copy.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    out.handle = reinterpret_cast<uint64_t>(l);
    return r;
  }
  Status ModuleUnload(Released<ModuleRef> m) {
    uint64_t handle = m.handle;
    layouts_.clear();  // the driver may hand a later function the address of one unloaded now
    kernel_of_function_.clear();
    return m.kind == 0 ? d_.cuModuleUnload_(reinterpret_cast<CUmodule>(handle))
                     : d_.cuLibraryUnload_(reinterpret_cast<CUlibrary>(handle));
  }
  Status ModuleGetFunction(ModuleRef m, std::string name, Created<Launchable>& out) {
    void* f = nullptr;
    CUresult r = m.kind == 0 ? d_.cuModuleGetFunction_(reinterpret_cast<CUfunction*>(&f), reinterpret_cast<CUmodule>(m.handle), name.c_str())
                             : d_.cuLibraryGetKernel_(reinterpret_cast<CUkernel*>(&f), reinterpret_cast<CUlibrary>(m.handle), name.c_str());
    out = reinterpret_cast<uint64_t>(f);
    return r;
  }
  Status ModuleGetGlobal(ModuleRef m, std::string name, ModuleGlobal& out) {
    CUdeviceptr p = 0;
    size_t n = 0;
    CUresult r = m.kind == 0 ? d_.cuModuleGetGlobal_(&p, &n, reinterpret_cast<CUmodule>(m.handle), name.c_str())
                             : d_.cuLibraryGetGlobal_(&p, &n, reinterpret_cast<CUlibrary>(m.handle), name.c_str());
    out = ModuleGlobal{p, n};  // copies to and from module variables are legitimate
    return r;
  }
  Status LibraryGetModule(ModuleRef lib, Created<ModuleRef>& out) {
    if (lib.kind != 1) return CUDA_ERROR_INVALID_HANDLE;
    CUmodule m = nullptr;
    CUresult r = d_.cuLibraryGetModule_(&m, reinterpret_cast<CUlibrary>(lib.handle));
    out = ModuleRef{reinterpret_cast<uint64_t>(m), 0};
    return r;
  }
  Status LibraryGetManaged(ModuleRef m, std::string name, ModuleGlobal& out) {
    if (m.kind != 1) return CUDA_ERROR_INVALID_HANDLE;  // a library's
    CUdeviceptr p = 0;
    size_t n = 0;
    CUresult r = d_.cuLibraryGetManaged_(&p, &n, reinterpret_cast<CUlibrary>(m.handle), name.c_str());
    out = ModuleGlobal{p, n};
    return r;
  }
  Status ModuleFunctions(ModuleRef m, std::vector<char>& names, Created<LaunchableList>& handles) {
    uint64_t handle = m.handle;
    uint32_t kind = m.kind;
    unsigned n = 0;
    CUresult r = kind == 0 ? d_.cuModuleGetFunctionCount_(&n, reinterpret_cast<CUmodule>(handle))
                           : d_.cuLibraryGetKernelCount_(&n, reinterpret_cast<CUlibrary>(handle));
    if (r != CUDA_SUCCESS) return r;
    std::vector<void*> found(n);
    r = kind == 0 ? d_.cuModuleEnumerateFunctions_(reinterpret_cast<CUfunction*>(found.data()), n, reinterpret_cast<CUmodule>(handle))
                  : d_.cuLibraryEnumerateKernels_(reinterpret_cast<CUkernel*>(found.data()), n, reinterpret_cast<CUlibrary>(handle));
    if (r != CUDA_SUCCESS) return r;
    for (void* f : found) {
      const char* name = nullptr;
      r = kind == 0 ? d_.cuFuncGetName_(&name, static_cast<CUfunction>(f)) : d_.cuKernelGetName_(&name, static_cast<CUkernel>(f));
      if (r != CUDA_SUCCESS) return r;
      if (name) names.insert(names.end(), name, name + std::strlen(name));
      names.push_back('\0');
      handles.v.push_back(reinterpret_cast<uint64_t>(f));
    }
    return CUDA_SUCCESS;
  }
  Status TensorMapEncode(TensorMapShape t, uint32_t interleave, uint32_t swizzle, uint32_t l2, uint32_t oob, std::vector<uint8_t>& map) {
    CUtensorMap m;
    auto* p = reinterpret_cast<void*>(t.address);
    auto dt = static_cast<CUtensorMapDataType>(t.dtype);
    auto il = static_cast<CUtensorMapInterleave>(interleave);
    auto sw = static_cast<CUtensorMapSwizzle>(swizzle);
    auto pr = static_cast<CUtensorMapL2promotion>(l2);
    auto fill = static_cast<CUtensorMapFloatOOBfill>(oob);
    CUresult r = t.kind == 0 ? d_.cuTensorMapEncodeTiled_(&m, dt, t.rank, p, t.dims.data(), t.strides.data(), t.box.data(),
                                                          t.estrides.data(), il, sw, pr, fill)
                             : d_.cuTensorMapEncodeIm2col_(&m, dt, t.rank, p, t.dims.data(), t.strides.data(), t.lower.data(),
                                                           t.upper.data(), t.channels, t.pixels, t.estrides.data(), il, sw, pr, fill);
    if (r == CUDA_SUCCESS) map.assign(reinterpret_cast<const uint8_t*>(&m), reinterpret_cast<const uint8_t*>(&m) + sizeof m);
    return r;
  }
  Status TensorMapReplaceAddress(std::vector<uint8_t> in, uint64_t address, std::vector<uint8_t>& map) {
    if (in.size() != sizeof(CUtensorMap)) return CUDA_ERROR_INVALID_VALUE;
    CUtensorMap m;
    std::memcpy(&m, in.data(), sizeof m);
    CUresult r = d_.cuTensorMapReplaceAddress_(&m, reinterpret_cast<void*>(address));
    if (r == CUDA_SUCCESS) map.assign(reinterpret_cast<const uint8_t*>(&m), reinterpret_cast<const uint8_t*>(&m) + sizeof m);
    return r;
  }
  Status FuncGetParamLayout(Launchable f, std::vector<uint32_t>& layout) {
    const std::vector<uint32_t>* l = nullptr;
    CUresult r = paramLayout(f, l);
    if (r == CUDA_SUCCESS) layout = *l;
    return r;
  }
  Status FuncGetAttribute(Launchable f, int32_t attribute, int32_t& value) {
    CUfunction fn = nullptr;
    if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
    int v = 0;
    CUresult r = d_.cuFuncGetAttribute_(&v, static_cast<CUfunction_attribute>(attribute), fn);
    value = v;
    return r;
  }
  Status FuncSetAttribute(Launchable f, int32_t attribute, int32_t value) {
    CUfunction fn = nullptr;
    if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
    return d_.cuFuncSetAttribute_(fn, static_cast<CUfunction_attribute>(attribute), value);
  }
  Status FuncSetCacheConfig(Launchable f, uint32_t config) {
    CUfunction fn = nullptr;
    if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
    return d_.cuFuncSetCacheConfig_(fn, static_cast<CUfunc_cache>(config));
  }

  Status LaunchKernel(Launchable f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz,
                      uint32_t shared, Stream stream, Blob params, LaunchAttrs attrs) {
    const std::vector<uint32_t>* layout = nullptr;
    if (CUresult r = paramLayout(f, layout); r != CUDA_SUCCESS) return r;
    args_.clear();
    const auto* base = static_cast<const uint8_t*>(params.data);
    for (size_t i = 0; i + 1 < layout->size(); i += 2) {
      if (uint64_t{(*layout)[i]} + (*layout)[i + 1] > params.size) return CUDA_ERROR_INVALID_VALUE;
      args_.push_back(const_cast<uint8_t*>(base + (*layout)[i]));
    }
    CUlaunchConfig cfg = config(gx, gy, gz, bx, by, bz, shared, stream, attrs);
    CUfunction fn = nullptr;
    if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
    return d_.cuLaunchKernelEx_(&cfg, fn, args_.data(), nullptr);
  }
  Status OccupancyMaxActiveBlocks(Launchable f, int32_t block, uint64_t smem, uint32_t flags, int32_t& blocks) {
    CUfunction fn = nullptr;
    if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
    int n = 0;
    CUresult r = d_.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_(&n, fn, block, smem, flags);
    blocks = n;
    return r;
  }

  Status OccupancyAvailableDynamicSMem(Launchable f, int32_t blocks, int32_t block, uint64_t& bytes) {
    CUfunction fn = nullptr;
    if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
    size_t n = 0;
    CUresult r = d_.cuOccupancyAvailableDynamicSMemPerBlock_(&n, fn, blocks, block);
    bytes = n;
    return r;
  }

  // A launch shape's cluster question (how many clusters fit, or how large one may be), asked of the driver.
  template <typename Query>
  Status clusterQuery(Query query, Launchable f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz,
                      uint32_t shared, const LaunchAttrs& attrs, int32_t& answer) {
    CUfunction fn = nullptr;
    if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
    CUlaunchConfig cfg = config(gx, gy, gz, bx, by, bz, shared, 0, attrs);
    int n = 0;
    CUresult r = query(&n, fn, &cfg);
    answer = n;
    return r;
  }
  Status OccupancyMaxActiveClusters(Launchable f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by,
                                    uint32_t bz, uint32_t shared, LaunchAttrs attrs, int32_t& clusters) {
    return clusterQuery(d_.cuOccupancyMaxActiveClusters_, f, gx, gy, gz, bx, by, bz, shared, attrs, clusters);
  }
  Status OccupancyMaxPotentialClusterSize(Launchable f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by,
                                          uint32_t bz, uint32_t shared, LaunchAttrs attrs, int32_t& size) {
    return clusterQuery(d_.cuOccupancyMaxPotentialClusterSize_, f, gx, gy, gz, bx, by, bz, shared, attrs, size);
  }
  Status DeviceTexture1DLinearMaxWidth(uint32_t format, uint32_t channels, uint64_t& width) {
    size_t w = 0;
    CUresult r = d_.cuDeviceGetTexture1DLinearMaxWidth_(&w, static_cast<CUarray_format>(format), channels, dev_);
    width = w;
    return r;
  }

  Status DeviceStatus(MemView& m, uint32_t& gpu, uint32_t& memory, std::string& driver) {
    // Without a context (a client that has only asked so far, nvidia-smi through the NVML shim), NVML
    // says what is free; only where NVML is missing does this make the context cuMemGetInfo needs.
    uint64_t free = 0;
    if (!ctx_ && nvml_.freeMemory(uuid_, free)) {
      m = MemView{std::min(free, total_), total_};
    } else {
      if (Status st = openContext(); st != CUDA_SUCCESS) return st;
      if (Status st = MemGetInfo(m); st != CUDA_SUCCESS) return st;
    }
    nvml_.query(uuid_, gpu, memory, driver);
    return CUDA_SUCCESS;
  }

  Status StreamBeginCaptureToGraph(Stream stream, Graph g, GraphNodes deps, uint32_t mode) {
    if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    auto d = nodes_(deps);
    return d_.cuStreamBeginCaptureToGraph_(stream_(stream), graph_(g), d.data(), nullptr, d.size(), static_cast<CUstreamCaptureMode>(mode));
  }
  Status StreamEndCapture(Stream stream, Created<Graph>& graph) {
    CUgraph g = nullptr;
    CUresult r = d_.cuStreamEndCapture_(stream_(stream), &g);
    graph = reinterpret_cast<uint64_t>(g);
    return r;
  }
  Status StreamCaptureInfo(Stream stream, uint32_t& status, uint64_t& id) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t capture_id = 0;
    CUresult r = d_.cuStreamGetCaptureInfo_(stream_(stream), &st, &capture_id, nullptr, nullptr, nullptr, nullptr);
    status = st;
    id = capture_id;
    return r;
  }
  Status StreamCaptureState(Stream stream, CaptureState& out) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CUgraph g = nullptr;
    const CUgraphNode* deps = nullptr;
    size_t n = 0;
    // No edge data asked: the driver answers CUDA_ERROR_LOSSY_QUERY where an edge is not a plain one.
    CUresult r = d_.cuStreamGetCaptureInfo_(stream_(stream), &st, &id, &g, &deps, nullptr, &n);
    out = CaptureState{};
    if (r != CUDA_SUCCESS) return r;
    out.status = st;
    out.id = id;
    out.graph = reinterpret_cast<uint64_t>(g);
    for (size_t i = 0; deps && i < n; ++i) {
      CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
      if ((r = d_.cuGraphNodeGetType_(deps[i], &type)) != CUDA_SUCCESS) return r;
      out.deps.v.push_back(reinterpret_cast<uint64_t>(deps[i]));
      out.types.push_back(type);
    }
    return CUDA_SUCCESS;
  }
  Status StreamUpdateCaptureDeps(Stream stream, Graph, GraphNodes deps, uint32_t flags) {
    auto d = nodes_(deps);
    return d_.cuStreamUpdateCaptureDependencies_(stream_(stream), d.data(), nullptr, d.size(), flags);
  }
  Status ThreadCaptureMode(uint32_t mode) {
    if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    auto m = static_cast<CUstreamCaptureMode>(mode);
    return d_.cuThreadExchangeStreamCaptureMode_(&m);
  }
  Status GraphNodeCount(Graph graph, uint64_t& nodes) {
    size_t n = 0;
    CUresult r = d_.cuGraphGetNodes_(reinterpret_cast<CUgraph>(graph.v), nullptr, &n);
    nodes = n;
    return r;
  }

  // Launch timing for the compute share (launch_timer.h): a pair of timing events around each launch,
  // read in launch order once the second completed. Events are reused.
  void startTiming(uint64_t stream) override {
    timing_start_ = timingEvent();
    if (timing_start_ && d_.cuEventRecordWithFlags_(timing_start_, stream_(stream), 0) != CUDA_SUCCESS) {
      spare_events_.push_back(timing_start_);
      timing_start_ = nullptr;
    }
  }
  void stopTiming(uint64_t stream) override {
    if (!timing_start_) return;  // (no event: this launch goes unmeasured)
    CUevent end = timingEvent();
    if (end && d_.cuEventRecordWithFlags_(end, stream_(stream), 0) == CUDA_SUCCESS) {
      timed_.push_back({timing_start_, end});
    } else {
      spare_events_.push_back(timing_start_);
      if (end) spare_events_.push_back(end);
    }
    timing_start_ = nullptr;
  }
  Finished takeFinished(bool wait_oldest) override {
    Finished f;
    if (timed_.empty()) return f;  // (nothing to ask the driver: no change of capture mode either)
    RelaxedCapture relaxed(d_);  // (querying an event is not allowed while the client captures in global mode)
    while (!timed_.empty()) {
      auto [start, end] = timed_.front();
      CUresult r = wait_oldest && f.launches == 0 ? d_.cuEventSynchronize_(end) : d_.cuEventQuery_(end);
      if (r == CUDA_ERROR_NOT_READY) break;
      float ms = 0;  // (an event that failed, as after a fault, counts as no time)
      if (r == CUDA_SUCCESS && d_.cuEventElapsedTime_(&ms, start, end) == CUDA_SUCCESS && ms > 0)
        f.busy_ns += static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
      ++f.launches;
      spare_events_.push_back(start);
      spare_events_.push_back(end);
      timed_.pop_front();
    }
    f.running = timed_.size();
    return f;
  }

 private:
  CUevent timingEvent() {
    CUevent e = nullptr;
    if (!spare_events_.empty()) {
      e = spare_events_.back();
      spare_events_.pop_back();
    } else if (RelaxedCapture relaxed(d_); d_.cuEventCreate_(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      e = nullptr;
    }
    return e;
  }
  // While it lives, this thread may make calls that a capture in global mode forbids (as PyTorch's
  // allocator does around its own): the worker's own timing events are none of the client's capture.
  struct RelaxedCapture {
    explicit RelaxedCapture(Driver& d) : d_(d) { d_.cuThreadExchangeStreamCaptureMode_(&mode_); }
    ~RelaxedCapture() { d_.cuThreadExchangeStreamCaptureMode_(&mode_); }
    RelaxedCapture(const RelaxedCapture&) = delete;
    RelaxedCapture& operator=(const RelaxedCapture&) = delete;
    Driver& d_;
    CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  };
  std::deque<std::pair<CUevent, CUevent>> timed_;  // timed launches still running, oldest first
  std::vector<CUevent> spare_events_;
  CUevent timing_start_ = nullptr;

  struct Slot {
    void* data = nullptr;
    size_t capacity = 0;
    CUevent done = nullptr;  // recorded after the last asynchronous copy that reads this slot
    bool in_use = false;
  };
  std::array<Slot, 4> slots_;
  uint64_t cap_ = 0;  // the lease's memory cap (0: none), reported as the device's memory
  size_t current_ = 0;

  static CUDA_MEMCPY2D copy2D(uint64_t width, uint64_t height) {
    CUDA_MEMCPY2D c{};
    c.WidthInBytes = width;
    c.Height = height;
    return c;
  }
  static CUDA_MEMCPY3D slice(uint64_t width, uint64_t height) {
    CUDA_MEMCPY3D c{};
    c.WidthInBytes = width;
    c.Height = height;
    c.Depth = 1;
    return c;
  }
  static void toArray(CUDA_MEMCPY3D& c, const ArrayRect& dst) {
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    c.dstArray = reinterpret_cast<CUarray>(dst.array.v);
    c.dstXInBytes = dst.x;
    c.dstY = dst.y;
    c.dstZ = dst.z;
  }
  static void fromArray(CUDA_MEMCPY3D& c, const ArrayRect& src) {
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = reinterpret_cast<CUarray>(src.array.v);
    c.srcXInBytes = src.x;
    c.srcY = src.y;
    c.srcZ = src.z;
  }
  static void toDevice(CUDA_MEMCPY2D& c, const DevRect& dst) {
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = dst.ptr;
    c.dstPitch = dst.pitch;
  }
  // After an asynchronous copy from `data` was queued on `stream`: if data lies in the current
  // page-locked receive slot, the slot's event keeps the slot from being reused before the copy has
  // read it. (From pageable memory the driver staged the bytes before returning.)
  CUresult holdSlot(Blob data, uint64_t stream) {
    Slot& s = slots_[current_];
    bool in_slot = s.data && data.data >= s.data && static_cast<const uint8_t*>(data.data) + data.size <=
                                                         static_cast<const uint8_t*>(s.data) + s.capacity;
    if (!in_slot) return CUDA_SUCCESS;
    if (!s.done && d_.cuEventCreate_(&s.done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      s.done = nullptr;
      return d_.cuStreamSynchronize_(stream_(stream));  // no event: finish the copy before the slot is reused
    }
    if (CUresult r = d_.cuEventRecordWithFlags_(s.done, stream_(stream), 0); r != CUDA_SUCCESS) return r;
    s.in_use = true;
    return CUDA_SUCCESS;
  }

  bool capturing(uint64_t stream) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return stream > 1 && d_.cuStreamIsCapturing_(stream_(stream), &st) == CUDA_SUCCESS &&
           st != CU_STREAM_CAPTURE_STATUS_NONE;
  }
  // As the driver does for what a capture cannot hold: the operation fails and the capture can only end
  // invalidated (querying a capturing stream is illegal, and invalidates its capture).
  Status refuseInCapture(uint64_t stream, const char* what, const char* why = kHostCopyInCapture) {
    spdlog::warn("{} was issued into a stream capture; gpool cannot capture {}, so the capture is invalidated", what, why);
    d_.cuStreamQuery_(stream_(stream));
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  Nvml nvml_;
  std::array<uint8_t, 16> uuid_{};
  // A launch configuration; its attributes live in attrs_ until the next call.
  CUlaunchConfig config(uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz, uint32_t shared,
                        uint64_t stream, const LaunchAttrs& attrs) {
    attrs_.resize(attrs.data.size / sizeof(CUlaunchAttribute));
    if (attrs.data.size) std::memcpy(attrs_.data(), attrs.data.data, attrs.data.size);
    CUlaunchConfig cfg{};
    cfg.gridDimX = gx; cfg.gridDimY = gy; cfg.gridDimZ = gz;
    cfg.blockDimX = bx; cfg.blockDimY = by; cfg.blockDimZ = bz;
    cfg.sharedMemBytes = shared;
    cfg.hStream = stream_(stream);
    cfg.attrs = attrs_.empty() ? nullptr : attrs_.data();
    cfg.numAttrs = static_cast<unsigned>(attrs_.size());
    return cfg;
  }
  static CUstream stream_(uint64_t s) { return reinterpret_cast<CUstream>(s); }
  static CUevent event_(uint64_t e) { return reinterpret_cast<CUevent>(e); }

  // A CUfunction for a launchable handle (CUkernel handles go through cuKernelGetFunction).
  CUresult function(Launchable f, CUfunction& out) {
    if (!f.is_kernel) {
      out = reinterpret_cast<CUfunction>(f.v);
      return CUDA_SUCCESS;
    }
    return d_.cuKernelGetFunction_(&out, reinterpret_cast<CUkernel>(f.v));
  }
  // The handle a client launched a kernel node's function with: its CUkernel, when the worker launched one
  // (paramLayout records which, at a function's first launch).
  Launchable launchableOf(const CUDA_KERNEL_NODE_PARAMS& p) {
    Launchable f(p.func ? reinterpret_cast<uint64_t>(p.func) : reinterpret_cast<uint64_t>(p.kern));
    f.is_kernel = !p.func;
    if (auto it = kernel_of_function_.find(f.v); p.func && it != kernel_of_function_.end()) {
      f.v = it->second;
      f.is_kernel = true;
    }
    return f;
  }

  CUresult paramLayout(Launchable f, const std::vector<uint32_t>*& out) {
    auto it = layouts_.find(f);
    if (it == layouts_.end()) {
      CUfunction fn = nullptr;
      if (CUresult r = function(f, fn); r != CUDA_SUCCESS) return r;
      std::vector<uint32_t> layout;
      for (size_t i = 0;; ++i) {
        size_t off = 0, size = 0;
        if (d_.cuFuncGetParamInfo_(fn, i, &off, &size) != CUDA_SUCCESS) break;
        layout.push_back(static_cast<uint32_t>(off));
        layout.push_back(static_cast<uint32_t>(size));
      }
      spdlog::debug("function {:#x}{}: {} parameters, {} bytes", f.v, f.is_kernel ? " (a CUkernel)" : "", layout.size() / 2,
                    layout.empty() ? 0 : layout[layout.size() - 2] + layout.back());
      if (f.is_kernel) kernel_of_function_[reinterpret_cast<uint64_t>(fn)] = f.v;
      it = layouts_.emplace(f, std::move(layout)).first;
    }
    out = &it->second;
    return CUDA_SUCCESS;
  }

  Driver& d_ = driver();
  void* staging_ = nullptr;  // page-locked, for device-to-host replies
  size_t staging_size_ = 0;
  CUdevice dev_ = 0;
  uint64_t total_ = 0;      // the device's memory (cuDeviceTotalMem)
  CUcontext ctx_ = nullptr;  // none until the first call that needs one (openContext)
  std::shared_ptr<PinnedBlocks> host_copy_blocks_ = std::make_shared<PinnedBlocks>();  // captured host copies' buffers
  int retains_ = 0;  // of the primary context: one when made, one more after each reset
  std::unordered_map<uint64_t, std::vector<uint32_t>> layouts_;
  std::unordered_set<CUgreenCtx> greens_;  // green contexts made and not destroyed
  std::unordered_map<uint64_t, uint64_t> kernel_of_function_;  // a CUkernel's function in the context -> the CUkernel
  std::vector<void*> args_;
  std::vector<CUlaunchAttribute> attrs_;
};

}  // namespace

bool cudaDriverUsable(std::string* why) {
  Driver& d = driver();
  if (!d.lib && !d.load()) {
    if (why) *why = d.error;
    return false;
  }
  int count = 0;
  if (d.cuInit_(0) != CUDA_SUCCESS || d.cuDeviceGetCount_(&count) != CUDA_SUCCESS || count == 0) {
    if (why) *why = "the driver loaded but reports no usable device";
    return false;
  }
  return true;
}

std::unique_ptr<Backend> makeCudaBackend() { return std::make_unique<CudaBackend>(); }

}  // namespace gpool::worker
