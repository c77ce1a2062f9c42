// Host-memory emulation of one CUDA device (see sim_backend.h).
#include "sim_backend.h"

#include "gpool/printable.h"

#include <cuda.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <tuple>
#include <stdexcept>

#include "gpool/protocol/module_image.h"

namespace gpool::worker {
namespace {

SimBackend* g_registering = nullptr;  // plugin registration runs on the constructing thread

void registerTrampoline(const char* name, gpool_sim_kernel_fn fn, unsigned n, const unsigned* sizes, const unsigned* aligns) {
  if (g_registering) g_registering->registerKernel(name, fn, n, sizes, aligns);
}

// Values modelled on an H100 SXM so that runtimes and libraries size themselves sensibly.
std::vector<int32_t> simAttributes(uint64_t memory_bytes) {
  std::vector<int32_t> a(CU_DEVICE_ATTRIBUTE_MAX, 0);
  auto set = [&](CUdevice_attribute k, int32_t v) { a[k] = v; };
  set(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64);
  set(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647);
  set(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535);
  set(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535);
  set(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152);
  set(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536);
  set(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32);
  set(CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647);
  set(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536);
  set(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1980000);
  set(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512);
  set(CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1);
  set(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, SimBackend::kMultiprocessors);
  set(CU_DEVICE_ATTRIBUTE_INTEGRATED, 0);
  set(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1);
  set(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, CU_COMPUTEMODE_DEFAULT);
  set(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, 131072);
  set(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH, 131072);
  set(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT, 65536);
  set(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH, 16384);
  set(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT, 16384);
  set(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH, 16384);
  set(CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT, 512);
  set(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1);
  set(CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1);
  set(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0x53);
  set(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0);
  set(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0);
  set(CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0);
  set(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 2619000);
  set(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120);
  set(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 52428800);
  set(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048);
  set(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3);
  set(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1);
  set(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9);
  set(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0);
  set(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472);
  set(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536);
  set(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1);
  set(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD, 0);
  set(CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 2);
  set(CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1);
  set(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32);
  set(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 34603008);
  set(CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, 134213632);
  set(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 1024);
  set(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST);
  set(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 1);
  set(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 1);
  set(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 1);
  (void)memory_bytes;
  return a;
}

constexpr uint64_t kAlign = 256;  // cudaMalloc's guaranteed alignment
constexpr uint64_t kPitchAlign = 512;
constexpr uint64_t kShareableBytes = 64 << 10;  // allocations at least this large can be opened by IPC  // cuMemAllocPitch's row alignment on the modelled device

// `count` values of `elem` bytes (1, 2 or 4) from p, as cuMemsetD8/16/32 write them.
void fill(uint8_t* p, uint32_t elem, uint64_t count, uint32_t value) {
  if (count == 0) return;  // (an empty fill may name address 0, which memset may not be given)
  if (elem == 1) {
    std::memset(p, static_cast<int>(value & 0xff), count);
  } else if (elem == 2) {
    auto v = static_cast<uint16_t>(value);
    for (uint64_t i = 0; i < count; ++i) std::memcpy(p + 2 * i, &v, 2);
  } else {
    for (uint64_t i = 0; i < count; ++i) std::memcpy(p + 4 * i, &value, 4);
  }
}

}  // namespace

SimBackend::SimBackend(SimOptions options) : options_(std::move(options)) {
  ipc_.saltHost(options_.host_salt);
  // Each large allocation holds a memfd (sim_ipc.cpp): allow as many open files as the host lets us.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  g_registering = this;
  for (const auto& path : options_.kernel_plugins) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw std::runtime_error("cannot load sim kernel plugin " + path + ": " + dlerror());
    auto reg = reinterpret_cast<void (*)(gpool_sim_register_fn)>(dlsym(h, "gpool_sim_register_kernels"));
    if (!reg) throw std::runtime_error(path + " does not export gpool_sim_register_kernels");
    reg(&registerTrampoline);
    plugins_.push_back(h);
  }
  g_registering = nullptr;
}

SimBackend::~SimBackend() { releaseAll(); }

void SimBackend::releaseAll() {
  for (uint64_t base : allocations_) std::free(reinterpret_cast<void*>(base));
  for (const auto& [key, base] : globals_) std::free(reinterpret_cast<void*>(base));
  for (const auto& [handle, fd] : physical_fds_) close(fd);
  for (const auto& [base, size] : reservations_) munmap(reinterpret_cast<void*>(base), size);
  for (const auto& [base, m] : shared_) {
    munmap(reinterpret_cast<void*>(base), m.size);
    close(m.fd);
  }
  for (const auto& [base, o] : opened_) munmap(reinterpret_cast<void*>(base), o.size);
  shared_.clear();
  opened_.clear();
  opened_handles_.clear();
  allocations_.clear();
  globals_.clear();
  physical_fds_.clear();
  reservations_.clear();
}

Status SimBackend::CtxReset(ResetAll) {
  imports_.clear();  // (its exports were ended by the worker: import_holds.h)
  releaseAll();
  arrays_.clear();
  mipmaps_.clear();
  stream_attributes_.clear();
  events_.clear();
  green_contexts_.clear();
  // Libraries and their kernels outlive a context; modules, functions and the kernels' functions do not.
  auto isLibraryOrKernel = [](uint64_t h) {
    uint64_t kind = (h >> 40) - 1;  // as newHandle encodes it
    return kind == static_cast<uint64_t>(HandleKind::kLibrary) || kind == static_cast<uint64_t>(HandleKind::kKernel);
  };
  std::erase_if(functions_, [&](const auto& e) { return !isLibraryOrKernel(e.first); });
  std::erase_if(images_, [&](const auto& e) { return !isLibraryOrKernel(e.first); });
  kernel_function_.clear();
  limits_.clear();
  captures_.clear();
  captured_events_.clear();
  graphs_.clear();
  nodes_.clear();
  execs_.clear();
  conditionals_.clear();
  pools_.clear();
  pool_allocations_.clear();
  default_pool_ = current_pool_ = 0;
  links_.clear();
  clearGraphMemory();
  user_objects_.clear();  // as the driver, at a reset: no destructor runs
  object_refs_.clear();
  return CUDA_SUCCESS;
}

void SimBackend::registerKernel(const char* name, gpool_sim_kernel_fn fn, unsigned n, const unsigned* sizes,
                                const unsigned* aligns) {
  RegisteredKernel k;
  k.fn = fn;
  uint32_t off = 0;
  for (unsigned i = 0; i < n; ++i) {
    uint32_t align = aligns ? aligns[i] : std::min(sizes[i], 8u);
    if (align == 0) align = 1;
    off = (off + align - 1) / align * align;
    k.layout.push_back(off);
    k.layout.push_back(sizes[i]);
    off += sizes[i];
  }
  spdlog::info("sim: registered host kernel {} ({} parameters)", name, n);
  kernels_[name] = std::move(k);
}

uint64_t SimBackend::newHandle(HandleKind kind) {
  // Distinct, never reused, never small (0..2 are stream sentinels).
  return (uint64_t{static_cast<unsigned>(kind) + 1} << 40) | next_handle_++;
}

Status SimBackend::open(int device, proto::HelloReply& hello) {
  if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
  hello.driver_version = CUDA_VERSION;
  hello.backend = "sim";
  proto::DeviceInfo d;
  d.name = "gpool sim device (no GPU)";
  const char uuid[16] = {'g', 'p', 'o', 'o', 'l', '-', 's', 'i', 'm', '-', 'd', 'e', 'v', 'i', 'c', 'e'};
  std::memcpy(d.uuid.data(), uuid, 16);
  d.total_mem = options_.memory_bytes;
  d.attributes = simAttributes(options_.memory_bytes);
  hello.devices.push_back(std::move(d));
  return CUDA_SUCCESS;
}

Status SimBackend::openContext() {
  if (context_open_) return CUDA_SUCCESS;
  // Held until the worker ends (gpool-server reclaims its slot), as a driver holds a context's memory.
  if (options_.device && options_.context_bytes && !options_.device->reserve(options_.slot, options_.context_bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  context_open_ = true;
  return CUDA_SUCCESS;
}

void* SimBackend::mapShared(int fd, uint64_t size) {
  if (!options_.fixed_addresses) return mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return mapFixed(fd, size, 0, PROT_READ | PROT_WRITE, MAP_SHARED);
}

void* SimBackend::mapFixed(int fd, uint64_t size, uint64_t alignment, int prot, int flags) {
  constexpr uint64_t kStep = 2 << 20;
  for (int tries = 0; tries < 64; ++tries) {
    if (alignment > kStep) next_fixed_ = (next_fixed_ + alignment - 1) / alignment * alignment;
    void* want = reinterpret_cast<void*>(next_fixed_);
    void* p = mmap(want, size, prot, flags | MAP_FIXED_NOREPLACE, fd, 0);
    next_fixed_ += (size + kStep - 1) / kStep * kStep;  // monotonic, as a driver's range allocator
    if (p == want) return p;
    if (p != MAP_FAILED) munmap(p, size);  // a kernel that took the address as a hint only
  }
  return MAP_FAILED;
}

Status SimBackend::MemAlloc(AllocBytes bytes, NewAlloc& out) {
  // The lease's limit was checked by the worker's MemoryLedger; this is the host's own limit.
  // Large allocations are memfd mappings, which another worker of this host can map too (IPC).
  if (bytes >= kShareableBytes) {
    uint64_t size = (bytes + 4095) / 4096 * 4096;
    int fd = memfd_create("gpool-sim-memory", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
      if (fd >= 0) close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void* p = mapShared(fd, size);
    if (p == MAP_FAILED) {
      close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    out = NewAlloc{reinterpret_cast<uint64_t>(p), bytes};
    shared_[out.ptr] = SharedMemory{fd, size};
    return CUDA_SUCCESS;
  }
  uint64_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  out = NewAlloc{reinterpret_cast<uint64_t>(p), bytes};
  allocations_.insert(out.ptr);
  return CUDA_SUCCESS;
}

Status SimBackend::MemFree(FreedAlloc dptr) {
  if (graph_allocations_.count(dptr)) return streamFree(dptr, 0);  // its memory is the graph's node's
  if (auto it = pool_allocations_.find(dptr); it != pool_allocations_.end()) {
    if (auto p = pools_.find(it->second.first); p != pools_.end()) p->second.used -= it->second.second;
    pool_allocations_.erase(it);
  }
  if (auto it = shared_.find(dptr.ptr); it != shared_.end()) {
    shareable_.withdraw(ShareableHandles::Object::kPages, it->first);  // (what importers mapped stays theirs)
    munmap(reinterpret_cast<void*>(it->first), it->second.size);
    close(it->second.fd);
    shared_.erase(it);
    return CUDA_SUCCESS;
  }
  allocations_.erase(dptr);
  std::free(reinterpret_cast<void*>(dptr.ptr));
  return CUDA_SUCCESS;
}

Status SimBackend::MemGetInfo(MemView& m) {
  m = MemView{options_.memory_bytes, options_.memory_bytes};  // the worker subtracts what the lease holds
  return CUDA_SUCCESS;
}

uint64_t SimBackend::pool(uint32_t which) {
  if (!default_pool_) {
    default_pool_ = current_pool_ = newHandle(HandleKind::kMemPool);
    pools_[default_pool_];
  }
  return which == 1 ? default_pool_ : current_pool_;
}

Status SimBackend::poolAllocate(uint64_t p, AllocBytes bytes, NewAlloc& out) {
  if (Status st = MemAlloc(bytes, out); st != CUDA_SUCCESS) return st;
  Pool& pl = pools_[p];
  pl.used += bytes;
  pl.used_high = std::max(pl.used_high, pl.used);
  pool_allocations_[out.ptr] = {p, bytes};
  return CUDA_SUCCESS;
}

// Inside a stream capture these are graph memory nodes (sim_graph_memory.cpp).
Status SimBackend::MemAllocAsync(AllocBytes bytes, Stream stream, NewAlloc& out) {
  if (Capture* c = capturing(stream)) return captureAllocation(*c, bytes, out);
  return poolAllocate(pool(0), bytes, out);
}

Status SimBackend::MemAllocFromPoolAsync(AllocBytes bytes, MemPool p, Stream stream, NewAlloc& out) {
  if (pools_[p].source_pid) return CUDA_ERROR_INVALID_VALUE;  // an imported pool only opens its exporter's
  if (Capture* c = capturing(stream)) return captureAllocation(*c, bytes, out);
  return poolAllocate(p, bytes, out);
}

Status SimBackend::MemFreeAsync(FreedAlloc ptr, Stream stream) {
  if (graph_allocations_.count(ptr)) return streamFree(ptr, stream);
  if (Capture* c = capturing(stream)) return refuseInCapture(*c, "a stream-ordered free of memory no graph allocated");
  return MemFree(ptr);  // work runs in issue order
}

Status SimBackend::MemPoolCreate(uint32_t type, uint32_t handle_types, uint64_t, uint32_t, Created<MemPool>& out) {
  if (type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  pool(0);
  out = newHandle(HandleKind::kMemPool);
  pools_[out].handle_types = handle_types;
  return CUDA_SUCCESS;
}

Status SimBackend::MemPoolDestroy(Released<MemPool> p) {
  if (p == default_pool_) return CUDA_ERROR_INVALID_VALUE;  // as the driver: the default pool stays
  shareable_.withdraw(ShareableHandles::Object::kPool, p.v);
  if (p == current_pool_) current_pool_ = default_pool_;
  pools_.erase(p);
  return CUDA_SUCCESS;
}

Status SimBackend::DeviceGetMemPool(uint32_t which, Created<MemPool>& out) {
  if (which > 1) return CUDA_ERROR_INVALID_VALUE;
  out = pool(which);
  return CUDA_SUCCESS;
}

Status SimBackend::DeviceSetMemPool(MemPool p) {
  if (pools_[p].source_pid) return CUDA_ERROR_INVALID_VALUE;
  current_pool_ = p;
  return CUDA_SUCCESS;
}

Status SimBackend::MemPoolTrimTo(MemPool, uint64_t) { return CUDA_SUCCESS; }  // nothing is cached

Status SimBackend::MemPoolSetAttribute(MemPool p, PoolAttribute a) {
  Pool& pl = pools_[p];
  if (a.attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH || a.attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) {
    if (a.value != 0) return CUDA_ERROR_INVALID_VALUE;  // high watermarks may only be reset
    pl.used_high = pl.used;
  } else {
    pl.attributes[a.attr] = a.value;
  }
  return CUDA_SUCCESS;
}

Status SimBackend::MemPoolGetAttribute(MemPool p, uint32_t attr, uint64_t& value) {
  const Pool& pl = pools_[p];
  switch (attr) {
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:  // the sim caches nothing: reserved is what is used
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: value = pl.used; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: value = pl.used_high; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: {
      auto it = pl.attributes.find(attr);
      value = it != pl.attributes.end() ? it->second : (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD ? 0 : 1);
      return CUDA_SUCCESS;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

namespace {
// Whether a stream wait on `*p` for `value` is satisfied (cuda.h, CUstreamWaitValue_flags).
bool waitSatisfied(const void* p, uint32_t bytes, uint64_t value, uint32_t flags) {
  uint64_t v = 0;
  std::memcpy(&v, p, bytes);
  if (bytes == 4) value &= 0xffffffffu;
  switch (flags & 3) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return bytes == 4 ? static_cast<int32_t>(static_cast<uint32_t>(v) - static_cast<uint32_t>(value)) >= 0
                        : static_cast<int64_t>(v - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return v == value;
    case CU_STREAM_WAIT_VALUE_AND: return (v & value) != 0;
    default: return (bytes == 4 ? ~(v | value) & 0xffffffffu : ~(v | value)) != 0;  // NOR
  }
}
}  // namespace

Status SimBackend::HostFuncChannel(uint32_t& port, std::vector<uint8_t>& token) {
  return Backend::HostFuncChannel(port, token);  // the worker's, whatever the backend
}
Status SimBackend::HostFuncChannelLocal(std::string client, std::string& name, std::vector<uint8_t>& token) {
  return Backend::HostFuncChannelLocal(std::move(client), name, token);
}
Status SimBackend::LaunchableOwner(Launchable f, OwnerOf& o) { return Backend::LaunchableOwner(f, o); }
Status SimBackend::GraphAllocationsGone(FreedAddresses f, GoneAllocations& g) { return Backend::GraphAllocationsGone(f, g); }

// Server-to-server copies: the worker's, whatever the backend.
Status SimBackend::PeerListen(uint32_t& port, std::vector<uint8_t>& key, uint32_t& link) { return Backend::PeerListen(port, key, link); }
Status SimBackend::PeerConnect(std::string host, uint32_t port, std::vector<uint8_t> key, uint32_t& link) {
  return Backend::PeerConnect(std::move(host), port, std::move(key), link);
}
Status SimBackend::PeerAccept(uint32_t link) { return Backend::PeerAccept(link); }
Status SimBackend::PeerSend(uint32_t link, DevRange src) { return Backend::PeerSend(link, src); }
Status SimBackend::PeerReceive(uint32_t link, DevRange dst) { return Backend::PeerReceive(link, dst); }

// Shared page-locked host memory: the worker's; the sim reaches it at its address, with nothing to pin.
Status SimBackend::HostPoolAttach(HostWindow w) { return Backend::HostPoolAttach(w); }
Status SimBackend::HostPoolKeepFree(KeptFree k) { return Backend::HostPoolKeepFree(k); }
Status SimBackend::HostPoolRegister(HostRange r) { return Backend::HostPoolRegister(r); }
Status SimBackend::HostPoolUnregister(HostRangeBase r) { return Backend::HostPoolUnregister(r); }

Status SimBackend::LaunchHostFunc(Stream stream, uint64_t id) {
  // Work runs in issue order: the worker waits here until the client's function has returned.
  issue(stream, [this, id] { callbacks_.run(id); }, CU_GRAPH_NODE_TYPE_HOST, hostParams(id));
  return CUDA_SUCCESS;
}

Status SimBackend::StreamWaitValue(Stream stream, DevWord w, uint64_t value, uint32_t flags) {
  // Work runs in issue order, so nothing issued later can satisfy the wait: it holds now, or never.
  auto* p = reinterpret_cast<const void*>(w.ptr);
  if (!capturing(stream) && !waitSatisfied(p, w.bytes, value, flags)) {
    spdlog::warn("sim: a stream wait on {:#x} can never be satisfied here (work runs in issue order)", w.ptr);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  issue(stream, [] {}, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  return CUDA_SUCCESS;
}

Status SimBackend::StreamWriteValue(Stream stream, DevWord w, uint64_t value, uint32_t) {
  issue(stream, [this, w, value] {
    if (reachable(w.ptr, w.bytes)) std::memcpy(reinterpret_cast<void*>(w.ptr), &value, w.bytes);
  }, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  return CUDA_SUCCESS;
}

// Writes in order; a wait that does not hold when its node runs never will (work runs in issue order):
// said once, and passed over.
std::function<void()> SimBackend::memOpsOp(const MemOps& m) {
  return [this, m] {
    for (size_t i = 0; i < m.count(); ++i) {
      uint32_t op = m.op(i), bytes = m.bytes(i);
      if (bytes == 0 || !reachable(m.ptr(i), bytes)) continue;
      auto* p = reinterpret_cast<void*>(m.ptr(i));
      uint64_t value = m.value(i);
      if (op == MemOps::kWrite32 || op == MemOps::kWrite64) std::memcpy(p, &value, bytes);
      else if (!waitSatisfied(p, bytes, value, m.flags(i)) && !std::exchange(said_unsatisfied_wait_, true))
        spdlog::warn("sim: a batch memory-operation node waits on {:#x}, which can never be satisfied here", m.ptr(i));
    }
  };
}

Status SimBackend::MemcpyHtoD(DevWrite w, Stream stream, uint32_t) {
  if (Capture* c = capturing(stream)) return refuseInCapture(*c, "a host-to-device copy");
  if (w.data.size) std::memcpy(reinterpret_cast<void*>(w.ptr), w.data.data, w.data.size);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) {
  if (Capture* c = capturing(stream)) return refuseInCapture(*c, "a device-to-host copy");
  if (bytes) std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyDtoD(DevCopy c, Stream stream, uint32_t) {
  DevCopyRect rect{DevRect{c.dst, c.bytes, c.bytes, 1}, DevRect{c.src, c.bytes, c.bytes, 1}};
  if (c.bytes) issue(stream, copyOp(rect), CU_GRAPH_NODE_TYPE_MEMCPY, copyParams(rect));
  return CUDA_SUCCESS;
}

Status SimBackend::Memset(DevFill f, uint32_t value, Stream stream, uint32_t) {
  DevFillRect rect{DevRect{f.ptr, f.bytes(), f.bytes(), 1}, f.elem};
  issue(stream, fillOp(rect, value), CU_GRAPH_NODE_TYPE_MEMSET, fillParams(rect, value));
  return CUDA_SUCCESS;
}

Status SimBackend::MemAllocPitch(PitchedAlloc a, NewAlloc& out, uint64_t& pitch) {
  pitch = (a.width + kPitchAlign - 1) / kPitchAlign * kPitchAlign;  // as a GPU with this alignment would
  return MemAlloc(AllocBytes{pitch * a.height}, out);
}

Status SimBackend::Memset2D(DevFillRect f, uint32_t value, Stream stream, uint32_t) {
  issue(stream, fillOp(f, value), CU_GRAPH_NODE_TYPE_MEMSET, fillParams(f, value));
  return CUDA_SUCCESS;
}

// Work that may run later (captured, or a graph's node) checks when it runs that its memory is still the
// client's; what it would touch otherwise makes the launch fail as a GPU's would.
bool SimBackend::reachable(uint64_t ptr, uint64_t bytes) {
  if (!memory_ || memory_->containsRange(ptr, bytes)) return true;
  if (fault_ == CUDA_SUCCESS)
    spdlog::warn("sim: work launched from a graph touches {:#x} (+{} bytes), which is no longer the client's memory; "
                 "the launch fails with CUDA_ERROR_ILLEGAL_ADDRESS", ptr, bytes);
  fault_ = CUDA_ERROR_ILLEGAL_ADDRESS;
  return false;
}

std::function<void()> SimBackend::fillOp(const DevFillRect& f, uint32_t value) {
  return [this, r = f.dst, elem = f.elem, value] {
    if (!reachable(r.ptr, r.span())) return;
    for (uint64_t y = 0; y < r.height; ++y) fill(reinterpret_cast<uint8_t*>(r.ptr + y * r.pitch), elem, r.width / elem, value);
  };
}

std::function<void()> SimBackend::copyOp(const DevCopyRect& c) {
  return [this, c] {
    if (!reachable(c.dst.ptr, c.dst.span()) || !reachable(c.src.ptr, c.src.span())) return;
    for (uint64_t y = 0; y < c.dst.height; ++y)
      std::memmove(reinterpret_cast<void*>(c.dst.ptr + y * c.dst.pitch), reinterpret_cast<const void*>(c.src.ptr + y * c.src.pitch),
                   c.dst.width);
  };
}

Status SimBackend::MemcpyHtoD2D(DevWriteRect w, Stream stream, uint32_t) {
  if (Capture* c = capturing(stream)) return refuseInCapture(*c, "a 2D host-to-device copy");
  const auto* src = static_cast<const uint8_t*>(w.data.data);
  for (uint64_t y = 0; y < w.dst.height; ++y)
    std::memcpy(reinterpret_cast<void*>(w.dst.ptr + y * w.dst.pitch), src + y * w.dst.width, w.dst.width);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyDtoH2D(DevRect r, Stream stream, std::vector<uint8_t>& rows) {
  if (Capture* c = capturing(stream)) return refuseInCapture(*c, "a 2D device-to-host copy");
  rows.resize(r.width * r.height);
  for (uint64_t y = 0; y < r.height; ++y)
    std::memcpy(rows.data() + y * r.width, reinterpret_cast<const void*>(r.ptr + y * r.pitch), r.width);
  return CUDA_SUCCESS;
}

Status SimBackend::MemcpyDtoD2D(DevCopyRect c, Stream stream, uint32_t) {
  issue(stream, copyOp(c), CU_GRAPH_NODE_TYPE_MEMCPY, copyParams(c));
  return CUDA_SUCCESS;
}

Status SimBackend::PointerGetBase(DevAddress, RangeOf&) { return CUDA_SUCCESS; }  // answered by the worker's table

Status SimBackend::StreamCreate(uint32_t, int32_t, Created<Stream>& stream) {
  stream = newHandle(HandleKind::kStream);
  return CUDA_SUCCESS;
}
Status SimBackend::StreamDestroy(Released<Stream> stream) {
  captures_.erase(stream);
  stream_attributes_.erase(stream);
  return CUDA_SUCCESS;
}
Status SimBackend::StreamSynchronize(Stream stream) {
  if (Capture* c = capturing(stream)) return refuseInCapture(*c, "a stream synchronization");
  return CUDA_SUCCESS;
}
Status SimBackend::StreamQuery(Stream stream) {
  if (Capture* c = capturing(stream)) return refuseInCapture(*c, "a stream query");
  return CUDA_SUCCESS;
}

Status SimBackend::EventCreate(uint32_t flags, Created<Event>& event) {
  event = newHandle(HandleKind::kEvent);
  events_[event] = EventState{flags, false, {}};
  return CUDA_SUCCESS;
}
Status SimBackend::EventDestroy(Released<Event> event) {
  events_.erase(event);
  captured_events_.erase(event);
  return CUDA_SUCCESS;
}
Status SimBackend::EventSynchronize(Event) { return CUDA_SUCCESS; }  // work runs in issue order
Status SimBackend::EventQuery(Event) { return CUDA_SUCCESS; }
Status SimBackend::EventElapsedTime(Event start, Event end, float& ms) {
  auto a = events_.find(start), b = events_.find(end);
  if ((a->second.flags | b->second.flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!a->second.recorded || !b->second.recorded) return CUDA_ERROR_INVALID_HANDLE;
  ms = std::chrono::duration<float, std::milli>(b->second.at - a->second.at).count();
  return CUDA_SUCCESS;
}

// Work runs in issue order: a context's event has happened once recorded, and waiting on one is free.
Status SimBackend::CtxRecordEvent(Event e) {
  if (!captures_.empty()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // as the driver, while any stream captures
  eventOp(e.v, 0)();
  return CUDA_SUCCESS;
}
Status SimBackend::CtxWaitEvent(Event) {
  if (!captures_.empty()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return CUDA_SUCCESS;
}
Status SimBackend::CtxResetPersistingL2Cache() { return CUDA_SUCCESS; }  // no cache to reset
Status SimBackend::FlushGPUDirectRDMAWrites(uint32_t target, uint32_t scope) {  // nothing writes to it by RDMA
  const bool known = target == CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX &&
                     (scope == CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER || scope == CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES);
  return known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
Status SimBackend::PointerSetSyncMemops(DevAddress, uint32_t value) { return value > 1 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }

Status SimBackend::CtxSynchronize() {
  for (auto& [stream, c] : captures_) return refuseInCapture(c, "a context synchronization");
  return CUDA_SUCCESS;
}
Status SimBackend::CtxSetLimit(uint32_t limit, uint64_t value) {
  if (limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  limits_[limit] = value;
  return CUDA_SUCCESS;
}
Status SimBackend::CtxGetLimit(uint32_t limit, uint64_t& value) {
  if (limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  static const uint64_t defaults[] = {1024, 1 << 20, 8 << 20, 2, 2048, 0, 0};
  auto it = limits_.find(limit);
  value = it != limits_.end() ? it->second : (limit < std::size(defaults) ? defaults[limit] : 0);
  return CUDA_SUCCESS;
}

Status SimBackend::ModuleLoad(Blob image, uint32_t kind, Created<ModuleRef>& out) {
  if (kind > 1 || image.size == 0) return CUDA_ERROR_INVALID_VALUE;
  // The image must be what it claims to be, and complete; sizing never reads past what arrived.
  uint64_t need = proto::moduleImageSize(image.data, image.size);
  if (need == 0 || need > image.size) return CUDA_ERROR_INVALID_IMAGE;
  if (proto::isPtx(image.data)) keepInJitCache(static_cast<const uint8_t*>(image.data), need);
  CubinIndex index = CubinIndex::build(static_cast<const uint8_t*>(image.data), image.size);
  if (index.empty()) spdlog::debug("sim: module image describes no globals or parameters ({})", index.why());
  out.handle = newHandle(kind == 0 ? HandleKind::kModule : HandleKind::kLibrary);
  out.kind = kind;
  images_[out.handle] = std::move(index);
  return CUDA_SUCCESS;
}

Status SimBackend::ModuleUnload(Released<ModuleRef> m) {
  uint64_t handle = m.handle;
  if (auto lm = library_modules_.find(handle); lm != library_modules_.end()) {  // a library's module goes with it
    Released<ModuleRef> module{ModuleRef{lm->second, 0}};
    library_modules_.erase(lm);
    ModuleUnload(module);
  }
  images_.erase(handle);
  for (auto it = globals_.lower_bound({handle, std::string{}}); it != globals_.end() && it->first.first == handle;) {
    std::free(reinterpret_cast<void*>(it->second));
    it = globals_.erase(it);
  }
  for (auto it = functions_.begin(); it != functions_.end();) {
    if (it->second.owner == handle) {
      kernel_function_.erase(it->first);
      it = functions_.erase(it);
    } else {
      ++it;
    }
  }
  return CUDA_SUCCESS;
}

Status SimBackend::ModuleGetFunction(ModuleRef m, std::string name, Created<Launchable>& out) {
  if (name.empty()) return CUDA_ERROR_INVALID_VALUE;
  bool kernel = m.kind == 1;
  for (const auto& [h, f] : functions_)
    if (f.owner == m.handle && f.name == name && f.from_module == !kernel) {
      out = h;
      return CUDA_SUCCESS;
    }
  out = newHandle(kernel ? HandleKind::kKernel : HandleKind::kFunction);
  functions_[out] = Function{name, m.handle, !kernel};
  return CUDA_SUCCESS;
}

// A library's module: one per library, reading the library's image.
Status SimBackend::LibraryGetModule(ModuleRef lib, Created<ModuleRef>& out) {
  if (lib.kind != 1) return CUDA_ERROR_INVALID_HANDLE;
  auto [it, fresh] = library_modules_.try_emplace(lib.handle, 0);
  if (fresh) {
    it->second = newHandle(HandleKind::kModule);
    images_[it->second] = images_[lib.handle];
  }
  out = ModuleRef{it->second, 0};
  return CUDA_SUCCESS;
}

// A __managed__ variable is a global of the image, here as any other.
Status SimBackend::LibraryGetManaged(ModuleRef m, std::string name, ModuleGlobal& out) {
  if (m.kind != 1) return CUDA_ERROR_INVALID_HANDLE;
  return ModuleGetGlobal(m, std::move(name), out);
}

Status SimBackend::ModuleGetGlobal(ModuleRef m, std::string name, ModuleGlobal& out) {
  uint64_t handle = m.handle;
  for (const auto& [lib, module] : library_modules_)  // a library's module has the library's variables
    if (module == handle) handle = lib;
  const CubinIndex::Global* g = images_[handle].global(name);
  if (!g) return CUDA_ERROR_NOT_FOUND;
  auto [it, fresh] = globals_.try_emplace({handle, name}, 0);
  if (fresh) {
    // Placed on first use, with the image's initial bytes; lives until the module is unloaded.
    uint64_t rounded = (std::max<uint64_t>(g->size, 1) + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (!p) {
      globals_.erase(it);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    std::memset(p, 0, rounded);
    if (!g->init.empty()) std::memcpy(p, g->init.data(), g->init.size());
    it->second = reinterpret_cast<uint64_t>(p);
  }
  out = ModuleGlobal{it->second, g->size};
  return CUDA_SUCCESS;
}

Status SimBackend::KernelGetFunction(Kernel kernel, Created<Launchable>& function) {
  auto it = kernel_function_.find(kernel);
  if (it == kernel_function_.end()) {
    uint64_t f = newHandle(HandleKind::kFunction);
    functions_[f] = functions_[kernel];
    functions_[f].from_module = true;
    it = kernel_function_.emplace(kernel, f).first;
  }
  function = it->second;
  return CUDA_SUCCESS;
}

Status SimBackend::FuncGetParamLayout(Launchable f, std::vector<uint32_t>& layout) {
  const Function& fn = functions_[f];
  if (auto k = kernels_.find(fn.name); k != kernels_.end()) {
    layout = k->second.layout;
    return CUDA_SUCCESS;
  }
  auto image = images_.find(fn.owner);
  auto described = image != images_.end() ? image->second.paramLayout(fn.name) : std::nullopt;
  if (!described) return CUDA_ERROR_NOT_SUPPORTED;  // parameters unknown to the sim
  layout = std::move(*described);
  return CUDA_SUCCESS;
}

// A library kernel's attributes in this context are its function's: the driver keeps them on the CUfunction
// cuKernelGetFunction gives (cuda_backend.cpp sets and reads a kernel's through it), so what is set through
// either handle is read through the other.
uint64_t SimBackend::attributesOf(Launchable f) {
  if (!f.is_kernel) return f.v;
  Created<Launchable> function;
  KernelGetFunction(Kernel{f.v}, function);
  return function.v;
}

Status SimBackend::FuncGetAttribute(Launchable f, int32_t attribute, int32_t& value) {
  if (auto it = func_attributes_.find({attributesOf(f), attribute}); it != func_attributes_.end()) {
    value = it->second;
    return CUDA_SUCCESS;
  }
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: value = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: value = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: value = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: value = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: value = 49152; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: value = -1; break;
    default:
      if (attribute < 0 || attribute >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
      value = 0;
  }
  return CUDA_SUCCESS;
}

// Attributes a program may set are kept per function; the modelled device (an H100) takes at most
// 227 KiB of dynamic shared memory per block.
Status SimBackend::FuncSetAttribute(Launchable f, int32_t attribute, int32_t value) {
  if (attribute < 0 || attribute >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && (value < 0 || value > kMaxDynamicShared))
    return CUDA_ERROR_INVALID_VALUE;
  func_attributes_[{attributesOf(f), attribute}] = value;
  return CUDA_SUCCESS;
}

Status SimBackend::FuncSetCacheConfig(Launchable, uint32_t config) {
  return config <= CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

Status SimBackend::LaunchKernel(Launchable f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by,
                                uint32_t bz, uint32_t shared, Stream stream, Blob params, LaunchAttrs) {
  std::function<void()> op;
  KernelCall call{f, gx, gy, gz, bx, by, bz, shared, params};
  if (Status st = kernelOp(call, op); st != CUDA_SUCCESS) return st;
  ++launches_;
  if (Capture* c = capturing(stream)) captureNode(*c, std::move(op), CU_GRAPH_NODE_TYPE_KERNEL, kernelParams(call));
  else op();  // (no copy of the arguments on this path: it is every launch's)
  return CUDA_SUCCESS;
}

SimNodeParams SimBackend::kernelParams(const KernelCall& c) {
  const auto* bytes = static_cast<const uint8_t*>(c.params.data);
  return SimNodeParams{.f = c.f, .shape = {c.gx, c.gy, c.gz, c.bx, c.by, c.bz, c.shared}, .args = {bytes, bytes + c.params.size}};
}

void SimBackend::stopTiming(uint64_t) {
  timed_.busy_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now() - timing_from_).count());
  ++timed_.launches;
}

Status SimBackend::kernelOp(const KernelCall& c, std::function<void()>& op) {
  const Launchable& f = c.f;
  uint32_t gx = c.gx, gy = c.gy, gz = c.gz, bx = c.bx, by = c.by, bz = c.bz, shared = c.shared;
  const Blob& params = c.params;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (uint64_t{bx} * by * bz > 1024 || gy > 65535 || gz > 65535 || shared > 232448)
    return CUDA_ERROR_INVALID_VALUE;
  auto k = kernels_.find(functions_[f].name);
  if (k == kernels_.end()) {
    // Recorded, not run; the arguments must still cover the parameters the image declares.
    std::vector<uint32_t> layout;
    if (FuncGetParamLayout(f, layout) == CUDA_SUCCESS)
      for (size_t i = 0; i + 1 < layout.size(); i += 2)
        if (uint64_t{layout[i]} + layout[i + 1] > params.size) return CUDA_ERROR_INVALID_VALUE;
    spdlog::debug("sim: launch of {} recorded (no host implementation)", printable(functions_[f].name));
    op = [] {};  // still a node when captured
    return CUDA_SUCCESS;
  }
  const auto& layout = k->second.layout;
  for (size_t i = 0; i + 1 < layout.size(); i += 2)
    if (uint64_t{layout[i]} + layout[i + 1] > params.size) return CUDA_ERROR_INVALID_VALUE;
  // The arguments are copied: a captured launch runs later, from a graph.
  std::vector<uint8_t> bytes(static_cast<const uint8_t*>(params.data), static_cast<const uint8_t*>(params.data) + params.size);
  op = [this, fn = k->second.fn, layout, bytes = std::move(bytes), gx, gy, gz, bx, by, bz, shared]() mutable {
    std::vector<void*> args;
    for (size_t i = 0; i + 1 < layout.size(); i += 2) args.push_back(bytes.data() + layout[i]);
    gpool_sim_launch l{{gx, gy, gz}, {bx, by, bz}, shared, static_cast<unsigned>(args.size()), args.data(), &setConditional, this};
    auto from = std::chrono::steady_clock::now();
    fn(&l);
    if (options_.busy)  // (the device time the driver would count: gpool-server's audit reads it)
      options_.busy->add(options_.slot, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                                  std::chrono::steady_clock::now() - from).count()));
  };
  return CUDA_SUCCESS;
}

// As the modelled SM: 2048 threads, 32 blocks and 228 KiB of shared memory (1 KiB of it reserved per block);
// a block asking for more dynamic shared memory than its function allows fits nowhere.
Status SimBackend::OccupancyMaxActiveBlocks(Launchable f, int32_t block, uint64_t smem, uint32_t, int32_t& blocks) {
  if (block <= 0 || block > 1024) return CUDA_ERROR_INVALID_VALUE;
  int32_t allowed = 0;
  FuncGetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, allowed);
  if (smem > static_cast<uint64_t>(allowed)) {
    blocks = 0;
    return CUDA_SUCCESS;
  }
  blocks = std::min<int32_t>({32, 2048 / block, static_cast<int32_t>(233472 / (smem + 1024))});
  return CUDA_SUCCESS;
}

Status SimBackend::OccupancyMaxActiveClusters(Launchable, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx,
                                              uint32_t by, uint32_t bz, uint32_t, LaunchAttrs attrs, int32_t& clusters) {
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || uint64_t{bx} * by * bz > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t cluster = 1;
  for (uint64_t i = 0; i < attrs.data.size / sizeof(CUlaunchAttribute); ++i) {
    CUlaunchAttribute a;
    std::memcpy(&a, static_cast<const uint8_t*>(attrs.data.data) + i * sizeof a, sizeof a);
    if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      cluster = uint64_t{a.value.clusterDim.x} * a.value.clusterDim.y * a.value.clusterDim.z;
  }
  if (cluster == 0 || cluster > 16) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  clusters = static_cast<int32_t>(132 / cluster);  // one resident block per SM of the modelled device
  return CUDA_SUCCESS;
}

// The portable cluster size (8) of the modelled device, 16 where the launch allows a non-portable one.
Status SimBackend::OccupancyMaxPotentialClusterSize(Launchable f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx,
                                                    uint32_t by, uint32_t bz, uint32_t shared, LaunchAttrs attrs, int32_t& size) {
  int32_t clusters = 0;
  if (Status st = OccupancyMaxActiveClusters(f, gx, gy, gz, bx, by, bz, shared, attrs, clusters); st != CUDA_SUCCESS) return st;
  int32_t non_portable = 0;
  FuncGetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, non_portable);
  size = non_portable ? 16 : 8;
  return CUDA_SUCCESS;
}

// The modelled device's 1D linear texture limit (2^28 elements), for any element size.
Status SimBackend::DeviceTexture1DLinearMaxWidth(uint32_t format, uint32_t channels, uint64_t& width) {
  if (proto::ArrayShape::formatBytes(format) == 0 || (channels != 1 && channels != 2 && channels != 4)) return CUDA_ERROR_INVALID_VALUE;
  width = uint64_t{1} << 28;
  return CUDA_SUCCESS;
}

Status SimBackend::OccupancyAvailableDynamicSMem(Launchable, int32_t blocks, int32_t block, uint64_t& bytes) {
  if (blocks <= 0 || block <= 0 || block > 1024) return CUDA_ERROR_INVALID_VALUE;
  // The modelled SM's shared memory, split among the resident blocks, capped at the opt-in maximum.
  bytes = std::min<uint64_t>(232448, 233472 / static_cast<uint64_t>(blocks));
  return CUDA_SUCCESS;
}

Status SimBackend::ThreadCaptureMode(uint32_t mode) {
  return mode <= CU_STREAM_CAPTURE_MODE_RELAXED ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

Status SimBackend::DeviceStatus(MemView& m, uint32_t& gpu, uint32_t& memory, std::string& driver) {
  MemGetInfo(m);
  gpu = memory = 0;  // nothing runs on a device here
  driver = "gpool-sim";
  return CUDA_SUCCESS;
}

Status SimBackend::ModuleFunctions(ModuleRef m, std::vector<char>& names, Created<LaunchableList>& handles) {
  std::vector<std::string> kernels = images_[m.handle].kernels();
  for (const auto& k : kernels) {
    Created<Launchable> f;
    if (Status st = ModuleGetFunction(m, k, f); st != CUDA_SUCCESS) return st;
    names.insert(names.end(), k.begin(), k.end());
    names.push_back('\0');
    handles.v.push_back(f);
  }
  return CUDA_SUCCESS;
}

Status SimBackend::TensorMapEncode(TensorMapShape t, uint32_t, uint32_t, uint32_t, uint32_t, std::vector<uint8_t>& map) {
  if (t.address % 16 != 0 || t.dtype > CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B) return CUDA_ERROR_INVALID_VALUE;
  // The sim keeps the address and shape in its own layout; only a real driver's layout means anything.
  map.assign(sizeof(CUtensorMap), 0);
  std::memcpy(map.data(), &t.address, 8);
  std::memcpy(map.data() + 8, &t.rank, 4);
  for (uint32_t i = 0; i < t.rank; ++i) std::memcpy(map.data() + 16 + 8 * i, &t.dims[i], 8);
  return CUDA_SUCCESS;
}

Status SimBackend::TensorMapReplaceAddress(std::vector<uint8_t> in, uint64_t address, std::vector<uint8_t>& map) {
  if (in.size() != sizeof(CUtensorMap) || address % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  map = std::move(in);
  std::memcpy(map.data(), &address, 8);
  return CUDA_SUCCESS;
}

}  // namespace gpool::worker
