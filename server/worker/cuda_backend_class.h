// The cuda backend's class (cuda_backend.h makes one): its members are defined by concern in cuda_backend.cpp
// (the device, its context, buffers, timing, streams and captures), cuda_memory.cpp, cuda_arrays.cpp,
// cuda_modules.cpp (modules, functions, launches), cuda_graphs.cpp, cuda_host_callbacks.cpp (host functions,
// captured host copies, user objects), cuda_ipc.cpp (IPC and shareable handles), cuda_virtual_memory.cpp,
// cuda_link.cpp and cuda_green_contexts.cpp. Driver entry points are found by the exported symbol of the
// prototype cuda.h gives each name (Driver::load), so each pointer has the ABI it is called with.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend.h"
#include "cuda_forward.h"
#include "gpool/protocol/gpu_uuid.h"
#include "gpool/protocol/module_image.h"
#include "sm_partitions.h"

namespace gpool::worker {

// Why an operation issued into a stream capture is refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
inline constexpr const char* kHostCopyInCapture = "copies between client memory and the device";

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
  std::string path;  // the library named by gpool-server --cuda-driver (empty: libcuda.so.1 as the loader finds it)

  bool load() {
    const std::string name = path.empty() ? "libcuda.so.1" : path;
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      error = "cannot load " + name + ": " + dlerror();
      return false;
    }
    // gpool's own client library found in NVIDIA's place is a mistake, unless named on purpose: then this
    // worker's driver calls go on to the gpool-server GPOOL_SERVER names (docs/architecture.md, "The cuda
    // backend without a GPU").
    if (dlsym(lib, "gpool_client_library")) {
      if (path.empty()) {
        error = "libcuda.so.1 found first is gpool's client library, not NVIDIA's driver; remove gpool's lib "
                "directory from LD_LIBRARY_PATH/LD_PRELOAD for gpool-server";
        return false;
      }
      spdlog::warn("--cuda-driver {} is gpool's client library: this worker forwards its driver calls to another gpool-server "
                   "(a test of the cuda backend without a GPU)", path);
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

inline Driver& driver() {
  static Driver d;
  return d;
}
class CudaBackend final : public Backend {
 public:
  // The run() overrides, one per call in calls.def, each calling the member of the call's name below.
#define X(name, number, mode, ins, outs) GPOOL_BACKEND_RUN(name)
#include "gpool/protocol/calls.def"
#undef X

  ~CudaBackend() override;
  void releaseBuffers();

  void* stagingBuffer(size_t bytes) override;

  // Requests are received into page-locked slots, so a host-to-device copy from one runs asynchronously
  // (the driver stages pageable memory synchronously). A slot an unfinished copy reads is not handed out
  // again until its event completes; small requests keep reusing the current slot.
  void setMemoryCap(uint64_t bytes) override { cap_ = bytes; }

  uint8_t* frameBuffer(size_t bytes) override;

  Status open(int device, proto::HelloReply& hello) override;

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

  Status SmResourceSplit(SmSource source, SmSplit split, std::vector<uint32_t>& out);
  Status GreenCtxCreate(SmSource source, SmSplit split, const std::vector<uint32_t>& picks, uint32_t flags, Created<GreenCtx>& out);
  Status GreenCtxDestroy(Released<GreenCtx> g);
  GPOOL_FORWARD(GreenCtxStreamCreate, cuGreenCtxStreamCreate)
  GPOOL_FORWARD(GreenCtxRecordEvent, cuGreenCtxRecordEvent)
  GPOOL_FORWARD(GreenCtxWaitEvent, cuGreenCtxWaitEvent)
  Status smParts(SmSource source, SmSplit split, std::vector<CUdevResource>& parts);
  GPOOL_FORWARD(CtxResetPersistingL2Cache, cuCtxResetPersistingL2Cache)
  Status FlushGPUDirectRDMAWrites(uint32_t target, uint32_t scope);
  Status PointerSetSyncMemops(DevAddress p, uint32_t value);
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
  Status MemPoolDestroy(Released<MemPool> p);
  GPOOL_FORWARD(MemPoolTrimTo, cuMemPoolTrimTo)

  Status StreamWaitValue(Stream stream, DevWord w, uint64_t value, uint32_t flags);
  Status StreamWriteValue(Stream stream, DevWord w, uint64_t value, uint32_t flags);
  CUmemAllocationProp deviceProp(uint32_t handle_types = 0, uint32_t compression = 0, uint32_t usage = 0) const;
  Status MemGetGranularity(uint32_t option, uint64_t& bytes);
  Status MemAddressReserve(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t flags, Created<VaRange>& out);
  Status MemAddressFree(Released<VaRange> r) { return d_.cuMemAddressFree_(r.ptr, r.size); }
  Status MemCreate(AllocBytes bytes, uint32_t handle_types, uint32_t compression, uint32_t usage, Created<Physical>& out);
  Status MemRelease(Released<Physical> h);
  Status MemMap(VaMap m) { return d_.cuMemMap_(m.ptr, m.size, m.offset, m.physical.v, 0); }
  Status MemUnmap(VaUnmap u) { return d_.cuMemUnmap_(u.ptr, u.size); }
  Status MemSetAccess(VaMapped m, uint32_t flags);

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
  static std::vector<char> logOf(const std::vector<char>& buffer);
  Status LinkCreate(JitOptions o, Created<LinkState>& out);
  Status LinkAddData(LinkState l, uint32_t type, Blob data, std::string name, std::vector<char>& error_log);
  Status LinkComplete(LinkState l, std::vector<uint8_t>& image, std::vector<char>& info_log, std::vector<char>& error_log);
  Status LinkDestroy(Released<LinkState> l);

  // A host function: the driver's callback thread waits, in stream order, until the client's function
  // has returned. A captured one (a graph's host node) runs at every replay, so its argument lives as
  // long as the backend; one launched directly runs once and frees its argument.
  struct HostFuncArg {
    HostCallbacks* callbacks;
    uint64_t id;
  };
  std::deque<HostFuncArg> host_funcs_;  // the captured ones (and graphs' host nodes)
  HostFuncArg* keepHostFunc(uint64_t id);
  static void CUDA_CB hostFunc(void* p);
  static void CUDA_CB hostFuncOnce(void* p);
  Status LaunchHostFunc(Stream stream, uint64_t id);

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
  static void CUDA_CB freeHostCopy(void* p);
  HostCopyArg* stagingFor(uint64_t id, size_t bytes);
  CUresult keepWith(CUgraph g, HostCopyArg* a);
  static void CUDA_CB fetchRows(void* p);
  static void CUDA_CB deliverRows(void* p);
  HostCopyArg* hostCopy(uint64_t id, const HostRowsCopy& c, CUDA_MEMCPY3D& p);
  Status HostCopyCapture(HostRowsCopy c, Stream stream, uint64_t id, uint32_t& captured);
  Status GraphAddHostCopyNode(Graph g, GraphNodes deps, HostRowsCopy c, uint64_t id, Created<GraphNode>& out);

  Status UserObjectCreate(uint64_t id, NewRefs refs, Created<UserObject>& out);
  static CUuserObject object_(const UserObject& o) { return reinterpret_cast<CUuserObject>(o.v); }
  Status UserObjectRetain(RefsAdded r) { return d_.cuUserObjectRetain_(object_(r.obj), r.count); }
  Status UserObjectRelease(RefsReleased r) { return d_.cuUserObjectRelease_(object_(r.obj), r.count); }
  Status GraphRetainUserObject(Graph g, RefsAdded r);
  Status GraphReleaseUserObject(Graph g, RefsReleased r) { return d_.cuGraphReleaseUserObject_(graph_(g), object_(r.obj), r.count); }

  // Explicit graph construction. Node arguments are copied by the driver when a node is added or set.
  static CUgraph graph_(uint64_t g) { return reinterpret_cast<CUgraph>(g); }
  static std::vector<CUgraphNode> nodes_(const GraphNodes& n);
  CUresult kernelParams(const KernelCall& c, CUDA_KERNEL_NODE_PARAMS& p);
  template <typename Add>
  Status addNode(Created<GraphNode>& out, Add add) {
    CUgraphNode node = nullptr;
    CUresult r = add(&node);
    out = reinterpret_cast<uint64_t>(node);
    return r;
  }
  Status GraphCreate(uint32_t flags, Created<Graph>& out);
  Status GraphAddEmptyNode(Graph g, GraphNodes deps, Created<GraphNode>& out);
  Status GraphAddKernelNode(Graph g, GraphNodes deps, KernelCall call, Created<GraphNode>& out);
  static CUDA_MEMSET_NODE_PARAMS memsetParams(const DevFillRect& f, uint32_t value);
  static CUDA_MEMCPY3D memcpyParams(const DevCopyRect& c);
  Status GraphAddMemsetNode(Graph g, GraphNodes deps, DevFillRect f, uint32_t value, Created<GraphNode>& out);
  Status GraphAddMemcpyNode(Graph g, GraphNodes deps, DevCopyRect c, Created<GraphNode>& out);
  Status GraphAddMemAllocNode(Graph g, GraphNodes deps, GraphAllocBytes bytes, Created<GraphNode>& out, GraphAlloc& made);
  Status GraphAddMemFreeNode(Graph g, GraphNodes deps, GraphFreed ptr, Created<GraphNode>& out);
  Status GraphMemNodeGetParams(Graph, GraphNode node, uint64_t& ptr, uint64_t& bytes);
  Status DeviceGraphMemTrim() { return d_.cuDeviceGraphMemTrim_(dev_); }
  Status DeviceGraphMemGet(std::vector<uint64_t>& figures);
  Status DeviceGraphMemResetHigh(uint32_t attr);
  uint64_t captureGraph(uint64_t stream) override;
  void graphMemory(uint64_t& used, uint64_t& reserved) override;
  Status GraphAddHostNode(Graph g, GraphNodes deps, uint64_t id, Created<GraphNode>& out);
  Status GraphAddEventNode(Graph g, GraphNodes deps, Event e, uint32_t wait, Created<GraphNode>& out);
  Status GraphAddChildGraphNode(Graph g, GraphNodes deps, ChildGraph child, Created<GraphNode>& out);
  Status GraphAddDependencies(Graph g, GraphEdges e);
  Status GraphDestroyNode(Graph, Released<GraphNode> node) { return d_.cuGraphDestroyNode_(reinterpret_cast<CUgraphNode>(node.v)); }
  Status GraphKernelNodeSetParams(Graph, GraphNode node, KernelCall call);
  Status GraphExecKernelNodeSetParams(GraphExec exec, Graph, GraphNode node, KernelCall call);
  static CUgraphExec exec_(uint64_t e) { return reinterpret_cast<CUgraphExec>(e); }
  static CUgraphNode node_(uint64_t n) { return reinterpret_cast<CUgraphNode>(n); }
  // A batch memory-operation node: the operations as the driver takes them, for this worker's context.
  struct BatchMemOps {
    std::vector<CUstreamBatchMemOpParams> ops;
    CUDA_BATCH_MEM_OP_NODE_PARAMS params{};
  };
  BatchMemOps batchMemOps(const MemOps& m);
  Status GraphAddBatchMemOpNode(Graph g, GraphNodes deps, MemOps m, Created<GraphNode>& out);
  Status GraphBatchMemOpNodeSetParams(Graph, GraphNode node, MemOps m);
  Status GraphExecBatchMemOpNodeSetParams(GraphExec exec, Graph, GraphNode node, MemOps m);
  Status GraphExecMemsetNodeSetParams(GraphExec exec, Graph, GraphNode node, DevFillRect f, uint32_t value);
  Status GraphExecMemcpyNodeSetParams(GraphExec exec, Graph, GraphNode node, DevCopyRect c);
  Status GraphExecHostNodeSetParams(GraphExec exec, Graph, GraphNode node, uint64_t id);
  Status GraphExecUpdate(GraphExec exec, Graph g, uint32_t& result);

  Status GraphConditionalHandleCreate(Graph g, uint32_t initial, uint32_t flags, Created<Conditional>& out);
  Status GraphAddConditionalNode(Graph g, GraphNodes deps, Conditional c, uint32_t type, uint32_t size,
                                 Created<GraphNode>& out, Created<BodyGraphs>& bodies);
  Status GraphTopology(Graph g, Created<GraphNodes>& nodes, std::vector<uint32_t>& types, std::vector<uint64_t>& edges);
  Status GraphKernelNodeSetAttribute(Graph, GraphNode node, LaunchAttrs attr);
  Status GraphKernelNodeGetAttribute(Graph, GraphNode node, uint32_t id, std::vector<uint8_t>& value);
  Status GraphKernelNodeGetParams(Graph, GraphNode node, Launchable& f, uint32_t& is_kernel, std::vector<uint32_t>& shape,
                                  std::vector<uint8_t>& args);
  Status GraphMemsetNodeGetParams(Graph, GraphNode node, DevFillRect& f, uint32_t& value);
  bool deviceEnd(CUmemorytype t, CUdeviceptr ptr);
  Status GraphMemcpyNodeGetParams(Graph, GraphNode node, DevCopyRect& c);
  Status GraphEventNodeGetEvent(Graph, GraphNode node, uint32_t wait, Event& out);
  Status GraphHostNodeGetParams(Graph, GraphNode node, uint64_t& id);
  Status StreamSetAttribute(Stream stream, LaunchAttrs attr);
  Status StreamGetAttribute(Stream stream, uint32_t id, std::vector<uint8_t>& value);
  Status StreamCopyAttributes(Stream dst, Stream src) { return d_.cuStreamCopyAttributes_(stream_(dst), stream_(src)); }
  Status GraphKernelNodeCopyAttributes(Graph, GraphNode dst, Graph, GraphNode src);
  Status GraphChildGraphNodeGetGraph(Graph, GraphNode node, Created<BodyGraphs>& graph);
  Status GraphNodeFindInClone(Graph, GraphNode node, Graph clone, Created<GraphNode>& out);
  Status GraphRemoveDependencies(Graph g, GraphEdges e);
  Status GraphExecNodeSetEnabled(GraphExec exec, Graph, GraphNode node, uint32_t enabled);
  Status GraphExecNodeGetEnabled(GraphExec exec, Graph, GraphNode node, uint32_t& enabled);
  Status GraphExecChildGraphNodeSetParams(GraphExec exec, Graph, GraphNode node, ChildGraph child);
  Status GraphExecEventNodeSetEvent(GraphExec exec, Graph, GraphNode node, Event e, uint32_t wait);
  Status GraphEventNodeSetEvent(Graph, GraphNode node, Event e, uint32_t wait);
  Status GraphMemsetNodeSetParams(Graph, GraphNode node, DevFillRect f, uint32_t value);
  Status GraphMemcpyNodeSetParams(Graph, GraphNode node, DevCopyRect c);
  Status GraphHostNodeSetParams(Graph, GraphNode node, uint64_t id);

  Status IpcGetMemHandle(AllocBase p, std::vector<uint8_t>& handle);
  Status IpcOpenMemHandle(std::vector<uint8_t> handle, uint32_t flags, IpcMapping& out);
  Status IpcCloseMemHandle(IpcMapped p);
  Status IpcGetEventHandle(Event e, std::vector<uint8_t>& handle);
  Status IpcOpenEventHandle(std::vector<uint8_t> handle, Created<Event>& out);

  Status openContext() override;

  Status CtxReset(ResetAll);

  Status pinHost(uint64_t ptr, uint64_t bytes) override;
  Status unpinHost(uint64_t ptr) override { return d_.cuMemHostUnregister_(reinterpret_cast<void*>(ptr)); }

  Status exportPhysical(uint64_t h, int& fd) override;
  Status exportPool(uint64_t pool, int& fd) override;
  Status importPool(int fd, uint64_t& pool) override;
  Status exportPoolPointer(uint64_t ptr, std::vector<uint8_t>& record) override;
  Status importPoolPointer(uint64_t pool, const std::vector<uint8_t>& record, IpcMapping& out) override;
  Status freeImportedPointer(uint64_t ptr, uint64_t stream) override { return d_.cuMemFreeAsync_(ptr, stream_(stream)); }
  Status importPhysical(int fd, uint64_t&, uint64_t& h) override;

  Status MemAllocAsync(AllocBytes bytes, Stream stream, NewAlloc& out);
  Status MemAllocFromPoolAsync(AllocBytes bytes, MemPool pool, Stream stream, NewAlloc& out);
  Status MemPoolCreate(uint32_t type, uint32_t handles, uint64_t max_size, uint32_t usage, Created<MemPool>& out);
  Status DeviceGetMemPool(uint32_t which, Created<MemPool>& out);
  Status DeviceSetMemPool(MemPool pool) { return d_.cuDeviceSetMemPool_(dev_, reinterpret_cast<CUmemoryPool>(pool.v)); }
  // The reuse flags are ints; the sizes and counters cuuint64_t (cuda.h, CUmemPool_attribute).
  static bool intPoolAttribute(uint32_t attr) { return attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES; }
  Status MemPoolSetAttribute(MemPool pool, PoolAttribute a);
  Status MemPoolGetAttribute(MemPool pool, uint32_t attr, uint64_t& value);

  Status MemAlloc(AllocBytes bytes, NewAlloc& out);
  Status MemGetInfo(MemView& m);
  Status PointerGetBase(DevAddress, RangeOf&) { return CUDA_SUCCESS; }  // answered by the worker's table
  Status MemcpyHtoD(DevWrite w, Stream stream, uint32_t async);
  Status MemAllocPitch(PitchedAlloc a, NewAlloc& out, uint64_t& pitch);
  Status Memset2D(DevFillRect f, uint32_t value, Stream stream, uint32_t async);
  Status MemcpyHtoD2D(DevWriteRect w, Stream stream, uint32_t async);
  Status MemcpyDtoH2D(DevRect src, Stream stream, std::vector<uint8_t>& rows);
  Status MemcpyDtoD2D(DevCopyRect cr, Stream stream, uint32_t async);
  static CUDA_ARRAY3D_DESCRIPTOR descriptor(const ArrayShape& a);
  Status ArrayCreate(ArrayShape a, Created<Array>& out);
  Status ArrayDestroy(Released<Array> a) { return d_.cuArrayDestroy_(reinterpret_cast<CUarray>(a.v)); }
  Status MipmappedArrayCreate(MipmapShape m, Created<MipmappedArray>& out);
  Status MipmappedArrayGetLevel(MipmapLevel l, Created<Array>& out);
  Status MipmappedArrayDestroy(Released<MipmappedArray> m) { return d_.cuMipmappedArrayDestroy_(reinterpret_cast<CUmipmappedArray>(m.v)); }
  Status MemcpyHtoA2D(ArrayWrite w, Stream stream, uint32_t async);
  Status MemcpyAtoH2D(ArrayRect src, Stream stream, std::vector<uint8_t>& rows);
  Status MemcpyDtoA2D(ArrayDevCopy dc, Stream stream, uint32_t async);
  Status MemcpyAtoD2D(ArrayDevCopy dc, Stream stream, uint32_t async);
  Status MemcpyAtoA2D(ArrayCopy ac, Stream stream, uint32_t async);
  static CUDA_RESOURCE_DESC resource(const TexResource& r);
  Status TexObjectCreate(TexResource r, TexDescs descs, Created<TexObject>& out);
  Status TexObjectDestroy(Released<TexObject> t) { return d_.cuTexObjectDestroy_(t.v); }
  Status SurfObjectCreate(TexResource r, Created<SurfObject>& out);
  Status SurfObjectDestroy(Released<SurfObject> sobj) { return d_.cuSurfObjectDestroy_(sobj.v); }
  Status MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) override;
  Status MemcpyDtoD(DevCopy c, Stream stream, uint32_t async);
  Status Memset(DevFill f, uint32_t value, Stream stream, uint32_t async);
  Status ModuleLoad(Blob image, uint32_t kind, Created<ModuleRef>& out);
  Status ModuleUnload(Released<ModuleRef> m);
  Status ModuleGetFunction(ModuleRef m, std::string name, Created<Launchable>& out);
  Status ModuleGetGlobal(ModuleRef m, std::string name, ModuleGlobal& out);
  Status LibraryGetModule(ModuleRef lib, Created<ModuleRef>& out);
  Status LibraryGetManaged(ModuleRef m, std::string name, ModuleGlobal& out);
  Status ModuleFunctions(ModuleRef m, std::vector<char>& names, Created<LaunchableList>& handles);
  Status TensorMapEncode(TensorMapShape t, uint32_t interleave, uint32_t swizzle, uint32_t l2, uint32_t oob, std::vector<uint8_t>& map);
  Status TensorMapReplaceAddress(std::vector<uint8_t> in, uint64_t address, std::vector<uint8_t>& map);
  Status FuncGetParamLayout(Launchable f, std::vector<uint32_t>& layout);
  Status FuncGetAttribute(Launchable f, int32_t attribute, int32_t& value);
  Status FuncSetAttribute(Launchable f, int32_t attribute, int32_t value);
  Status FuncSetCacheConfig(Launchable f, uint32_t config);

  Status LaunchKernel(Launchable f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz,
                      uint32_t shared, Stream stream, Blob params, LaunchAttrs attrs);
  Status OccupancyMaxActiveBlocks(Launchable f, int32_t block, uint64_t smem, uint32_t flags, int32_t& blocks);

  Status OccupancyAvailableDynamicSMem(Launchable f, int32_t blocks, int32_t block, uint64_t& bytes);

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
                                    uint32_t bz, uint32_t shared, LaunchAttrs attrs, int32_t& clusters);
  Status OccupancyMaxPotentialClusterSize(Launchable f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by,
                                          uint32_t bz, uint32_t shared, LaunchAttrs attrs, int32_t& size);
  Status DeviceTexture1DLinearMaxWidth(uint32_t format, uint32_t channels, uint64_t& width);

  Status DeviceStatus(MemView& m, uint32_t& gpu, uint32_t& memory, std::string& driver);

  Status StreamBeginCaptureToGraph(Stream stream, Graph g, GraphNodes deps, uint32_t mode);
  Status StreamEndCapture(Stream stream, Created<Graph>& graph);
  Status StreamCaptureInfo(Stream stream, uint32_t& status, uint64_t& id);
  Status StreamCaptureState(Stream stream, CaptureState& out);
  Status StreamUpdateCaptureDeps(Stream stream, Graph, GraphNodes deps, uint32_t flags);
  Status ThreadCaptureMode(uint32_t mode);
  Status GraphNodeCount(Graph graph, uint64_t& nodes);

  void startTiming(uint64_t stream) override;
  void stopTiming(uint64_t stream) override;
  Finished takeFinished(bool wait_oldest) override;

 private:
  CUevent timingEvent();
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

  static CUDA_MEMCPY2D copy2D(uint64_t width, uint64_t height);
  static CUDA_MEMCPY3D slice(uint64_t width, uint64_t height);
  static void toArray(CUDA_MEMCPY3D& c, const ArrayRect& dst);
  static void fromArray(CUDA_MEMCPY3D& c, const ArrayRect& src);
  static void toDevice(CUDA_MEMCPY2D& c, const DevRect& dst);
  CUresult holdSlot(Blob data, uint64_t stream);

  bool capturing(uint64_t stream);
  Status refuseInCapture(uint64_t stream, const char* what, const char* why = kHostCopyInCapture);
  Nvml nvml_;
  std::array<uint8_t, 16> uuid_{};
  CUlaunchConfig config(uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz, uint32_t shared,
                        uint64_t stream, const LaunchAttrs& attrs);
  static CUstream stream_(uint64_t s) { return reinterpret_cast<CUstream>(s); }
  static CUevent event_(uint64_t e) { return reinterpret_cast<CUevent>(e); }

  CUresult function(Launchable f, CUfunction& out);
  Launchable launchableOf(const CUDA_KERNEL_NODE_PARAMS& p);

  CUresult paramLayout(Launchable f, const std::vector<uint32_t>*& out);

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

}  // namespace gpool::worker
