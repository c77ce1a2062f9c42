// The cuda backend (cuda_backend_class.h): the device and its context, the worker's page-locked buffers,
// launch timing, streams and captures.
#include "cuda_backend.h"

#include "cuda_backend_class.h"

namespace gpool::worker {

CudaBackend::~CudaBackend() {
  // Exiting the process frees everything; release the context for a tidy driver state.
  releaseBuffers();
  for (; ctx_ && retains_ > 0; --retains_) d_.cuDevicePrimaryCtxRelease_(dev_);
}

// The page-locked receive slots, staging buffer and timing events (made again on next use).
void CudaBackend::releaseBuffers() {
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

void* CudaBackend::stagingBuffer(size_t bytes) {
  if (bytes > staging_size_) {
    if (staging_) d_.cuMemFreeHost_(staging_);
    staging_ = nullptr;
    staging_size_ = 0;
    if (d_.cuMemHostAlloc_(&staging_, bytes, 0) != CUDA_SUCCESS) return Backend::stagingBuffer(bytes);
    staging_size_ = bytes;
  }
  return staging_;
}

uint8_t* CudaBackend::frameBuffer(size_t bytes) {
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

Status CudaBackend::open(int device, proto::HelloReply& hello) {
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

Status CudaBackend::FlushGPUDirectRDMAWrites(uint32_t target, uint32_t scope) {
  return d_.cuFlushGPUDirectRDMAWrites_(static_cast<CUflushGPUDirectRDMAWritesTarget>(target),
                                        static_cast<CUflushGPUDirectRDMAWritesScope>(scope));
}

Status CudaBackend::PointerSetSyncMemops(DevAddress p, uint32_t value) {
  if (value > 1) return CUDA_ERROR_INVALID_VALUE;
  int v = static_cast<int>(value);
  return d_.cuPointerSetAttribute_(&v, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p.ptr);
}

Status CudaBackend::StreamWaitValue(Stream stream, DevWord w, uint64_t value, uint32_t flags) {
  return w.bytes == 4 ? d_.cuStreamWaitValue32_(stream_(stream), w.ptr, static_cast<cuuint32_t>(value), flags)
                      : d_.cuStreamWaitValue64_(stream_(stream), w.ptr, value, flags);
}

Status CudaBackend::StreamWriteValue(Stream stream, DevWord w, uint64_t value, uint32_t flags) {
  return w.bytes == 4 ? d_.cuStreamWriteValue32_(stream_(stream), w.ptr, static_cast<cuuint32_t>(value), flags)
                      : d_.cuStreamWriteValue64_(stream_(stream), w.ptr, value, flags);
}

// A context reset: the worker's own buffers in the context go first, then the driver resets it.
// The primary context, retained on the first call that needs it (backend.h) and current on the
// dispatcher's thread, the only one that calls the driver with it.
Status CudaBackend::openContext() {
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

Status CudaBackend::CtxReset(ResetAll) {
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

Status CudaBackend::DeviceStatus(MemView& m, uint32_t& gpu, uint32_t& memory, std::string& driver) {
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

Status CudaBackend::StreamBeginCaptureToGraph(Stream stream, Graph g, GraphNodes deps, uint32_t mode) {
  if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  auto d = nodes_(deps);
  return d_.cuStreamBeginCaptureToGraph_(stream_(stream), graph_(g), d.data(), nullptr, d.size(), static_cast<CUstreamCaptureMode>(mode));
}

Status CudaBackend::StreamEndCapture(Stream stream, Created<Graph>& graph) {
  CUgraph g = nullptr;
  CUresult r = d_.cuStreamEndCapture_(stream_(stream), &g);
  graph = reinterpret_cast<uint64_t>(g);
  return r;
}

Status CudaBackend::StreamCaptureInfo(Stream stream, uint32_t& status, uint64_t& id) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t capture_id = 0;
  CUresult r = d_.cuStreamGetCaptureInfo_(stream_(stream), &st, &capture_id, nullptr, nullptr, nullptr, nullptr);
  status = st;
  id = capture_id;
  return r;
}

Status CudaBackend::StreamCaptureState(Stream stream, CaptureState& out) {
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

Status CudaBackend::StreamUpdateCaptureDeps(Stream stream, Graph, GraphNodes deps, uint32_t flags) {
  auto d = nodes_(deps);
  return d_.cuStreamUpdateCaptureDependencies_(stream_(stream), d.data(), nullptr, d.size(), flags);
}

Status CudaBackend::ThreadCaptureMode(uint32_t mode) {
  if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  auto m = static_cast<CUstreamCaptureMode>(mode);
  return d_.cuThreadExchangeStreamCaptureMode_(&m);
}

// Launch timing for the compute share (launch_timer.h): a pair of timing events around each launch,
// read in launch order once the second completed. Events are reused.
void CudaBackend::startTiming(uint64_t stream) {
  timing_start_ = timingEvent();
  if (timing_start_ && d_.cuEventRecordWithFlags_(timing_start_, stream_(stream), 0) != CUDA_SUCCESS) {
    spare_events_.push_back(timing_start_);
    timing_start_ = nullptr;
  }
}

void CudaBackend::stopTiming(uint64_t stream) {
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

CudaBackend::Finished CudaBackend::takeFinished(bool wait_oldest) {
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

CUevent CudaBackend::timingEvent() {
  CUevent e = nullptr;
  if (!spare_events_.empty()) {
    e = spare_events_.back();
    spare_events_.pop_back();
  } else if (RelaxedCapture relaxed(d_); d_.cuEventCreate_(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    e = nullptr;
  }
  return e;
}

// After an asynchronous copy from `data` was queued on `stream`: if data lies in the current
// page-locked receive slot, the slot's event keeps the slot from being reused before the copy has
// read it. (From pageable memory the driver staged the bytes before returning.)
CUresult CudaBackend::holdSlot(Blob data, uint64_t stream) {
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

bool CudaBackend::capturing(uint64_t stream) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  return stream > 1 && d_.cuStreamIsCapturing_(stream_(stream), &st) == CUDA_SUCCESS &&
         st != CU_STREAM_CAPTURE_STATUS_NONE;
}

// As the driver does for what a capture cannot hold: the operation fails and the capture can only end
// invalidated (querying a capturing stream is illegal, and invalidates its capture).
Status CudaBackend::refuseInCapture(uint64_t stream, const char* what, const char* why) {
  spdlog::warn("{} was issued into a stream capture; gpool cannot capture {}, so the capture is invalidated", what, why);
  d_.cuStreamQuery_(stream_(stream));
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

// A launch configuration; its attributes live in attrs_ until the next call.
CUlaunchConfig CudaBackend::config(uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz, uint32_t shared,
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

// A CUfunction for a launchable handle (CUkernel handles go through cuKernelGetFunction).
CUresult CudaBackend::function(Launchable f, CUfunction& out) {
  if (!f.is_kernel) {
    out = reinterpret_cast<CUfunction>(f.v);
    return CUDA_SUCCESS;
  }
  return d_.cuKernelGetFunction_(&out, reinterpret_cast<CUkernel>(f.v));
}

// The handle a client launched a kernel node's function with: its CUkernel, when the worker launched one
// (paramLayout records which, at a function's first launch).
Launchable CudaBackend::launchableOf(const CUDA_KERNEL_NODE_PARAMS& p) {
  Launchable f(p.func ? reinterpret_cast<uint64_t>(p.func) : reinterpret_cast<uint64_t>(p.kern));
  f.is_kernel = !p.func;
  if (auto it = kernel_of_function_.find(f.v); p.func && it != kernel_of_function_.end()) {
    f.v = it->second;
    f.is_kernel = true;
  }
  return f;
}

CUresult CudaBackend::paramLayout(Launchable f, const std::vector<uint32_t>*& out) {
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

void useCudaDriver(const std::string& path) { driver().path = path; }

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
