// The worker's request loop (docs/protocol.md describes what each check answers).
#include "dispatcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <future>
#include <optional>
#include <thread>
#include <tuple>
#include <utility>

namespace gpool::worker {
namespace {

namespace cu = proto::cu;

// Raised inside handle() for a frame that breaks the contract; ends the connection.
struct Violation {
  std::string what;
};

}  // namespace

template <typename C>
Status Dispatcher::execute(typename C::in::tuple& ins, typename C::out::tuple& outs) {
  if (needsContext<C>(ins))
    if (Status st = backend_.openContext(); st != cu::kSuccess) return st;
  CallScope scope;
  uint64_t headroom = 0;
  Status st = beforeCall<C>(ins, scope, headroom);
  if (st == cu::kSuccess) st = checks_.admitAll(ins, scope);
  if (st == cu::kSuccess) st = backend_.run(C{}, ins, outs);
  if (st == cu::kSuccess) {
    endExports<C>(ins, scope);
    checks_.commit(outs, scope);
  } else {
    checks_.abandon(scope);
  }
  afterCall<C>(ins, outs, st, scope, headroom);
  return st;
}

template <typename C>
Status Dispatcher::beforeCall(typename C::in::tuple& ins, CallScope& s, uint64_t& headroom) {
  namespace calls = proto::calls;
  if constexpr (std::is_same_v<C, calls::MemAllocAsync> || std::is_same_v<C, calls::MemFreeAsync>) {
    s.capture = captureOf(std::get<1>(ins));
  } else if constexpr (std::is_same_v<C, calls::MemAllocFromPoolAsync>) {
    s.capture = captureOf(std::get<2>(ins));
  } else if constexpr (std::is_same_v<C, calls::StreamEndCapture>) {
    s.capture = captureOf(std::get<0>(ins));
  } else if constexpr (std::is_same_v<C, calls::GraphLaunch>) {
    if (!graph_memory_.active()) return cu::kSuccess;
    uint64_t used = 0, reserved = 0;
    backend_.graphMemory(used, reserved);
    return graph_memory_.admitLaunch(std::get<0>(ins).v, used, reserved, headroom);
  } else if constexpr (std::is_same_v<C, calls::MemGetInfo> || std::is_same_v<C, calls::DeviceStatus>) {
    settleGraphMemory();  // what the lease sees includes the graph reserve as it is now
  }
  return cu::kSuccess;
}

template <typename C>
void Dispatcher::afterCall(typename C::in::tuple& ins, const typename C::out::tuple& outs, Status st, const CallScope& s,
                           uint64_t headroom) {
  namespace calls = proto::calls;
  if constexpr (std::is_same_v<C, calls::StreamEndCapture>) {
    if (s.capture) checks_.captureEnded(s.capture, st == cu::kSuccess);
  } else if constexpr (std::is_same_v<C, calls::GraphLaunch>) {
    if (st == cu::kSuccess) graph_memory_.launched(std::get<0>(ins).v);
    settleGraphMemory(headroom);
  } else if constexpr (std::is_same_v<C, calls::MemFree> || std::is_same_v<C, calls::MemFreeAsync>) {
    settleGraphMemory();
  } else if constexpr (std::is_same_v<C, calls::MemImportShareable>) {
    if (st == cu::kSuccess) imported_physical_.push_back(std::get<0>(outs).handle.v);
  } else if constexpr (std::is_same_v<C, calls::MemPoolImportPointer>) {
    if (st == cu::kSuccess) pool_imports_.push_back(std::get<0>(outs).ptr);
  } else if constexpr (std::is_same_v<C, calls::MemPoolFreeImported>) {
    if (auto it = std::find(pool_imports_.begin(), pool_imports_.end(), std::get<0>(ins).ptr);
        st == cu::kSuccess && it != pool_imports_.end())
      pool_imports_.erase(it);
  } else if constexpr (std::is_same_v<C, calls::MemRelease> || std::is_same_v<C, calls::MemUnmap> ||
                       std::is_same_v<C, calls::CtxReset>) {
    if constexpr (std::is_same_v<C, calls::CtxReset>) pool_imports_.clear();
    // Imported physical memory is held while the client has its handle or maps it (CUDA keeps it as long).
    std::erase_if(imported_physical_, [this](uint64_t h) {
      if (table_.physical(h)) return false;
      backend_.physicalImportGone(h);
      return true;
    });
  } else if constexpr (std::is_same_v<C, calls::GraphExecDestroy> || std::is_same_v<C, calls::GraphDestroy> ||
                       std::is_same_v<C, calls::DeviceGraphMemTrim>) {
    settleGraphMemory();
  }
}

template <typename C>
void Dispatcher::endExports(typename C::in::tuple& ins, const CallScope& s) {
  namespace calls = proto::calls;
  auto physicalBytes = [this](uint64_t h) {
    const PhysicalMemory* p = table_.physical(h);
    return p ? p->charge() : 0;
  };
  if constexpr (std::is_same_v<C, calls::MemFree> || std::is_same_v<C, calls::MemFreeAsync>) {
    for (auto& held : backend_.endExports(Shared::kAllocation, std::get<0>(ins).ptr))
      freed_imported_.keep(std::move(held.file), s.freed ? s.freed->bytes : 0);
  } else if constexpr (std::is_same_v<C, calls::MemRelease>) {
    for (auto& held : backend_.endExports(Shared::kPhysical, std::get<0>(ins).v)) {
      const PhysicalMemory* p = table_.physical(held.object);
      if (p && p->mappings > 0 && p->charged) {  // still mapped here: its charge moves to the importers' hold
        freed_imported_.keepMapped(std::move(held.file), p->bytes, held.object);
        table_.uncharge(held.object);
      } else {
        freed_imported_.keep(std::move(held.file), physicalBytes(held.object));
      }
    }
  } else if constexpr (std::is_same_v<C, calls::CtxReset>) {
    for (auto& held : backend_.endAllExports()) {
      const DeviceRange* r = held.kind == Shared::kAllocation ? table_.allocationAt(held.object) : nullptr;
      freed_imported_.keep(std::move(held.file), r ? r->bytes : physicalBytes(held.object));
    }
  }
}

bool Dispatcher::importersHold() {
  backend_.letGoOfImports();
  std::set<std::pair<Shared, uint64_t>> held;
  for (auto& export_ : backend_.endAllExports()) {
    held.emplace(export_.kind, export_.object);
    freed_imported_.keep(std::move(export_.file), 0);  // (still charged: the worker keeps it)
  }
  freed_imported_.settle();
  if (freed_imported_.empty()) return false;
  freeAllBut(held);
  return true;
}

void Dispatcher::waitForImporters() {
  if (freed_imported_.empty()) return;
  spdlog::info("the client's memory is still imported by {} other process(es); staying, with the lease charged for it, "
               "until they let go", freed_imported_.size());
  auto since = std::chrono::steady_clock::now();
  for (; !freed_imported_.empty(); freed_imported_.settle()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (std::chrono::steady_clock::now() - since > std::chrono::minutes(10)) {
      spdlog::info("the client's memory is still imported by {} other process(es)", freed_imported_.size());
      since = std::chrono::steady_clock::now();
    }
  }
  spdlog::info("the other processes let go of the client's memory");
}

uint64_t Dispatcher::captureOf(proto::Stream stream) {
  // Only a stream this client has may be asked about; the legacy stream never captures.
  return stream.v > 1 && table_.hasStream(stream.v) ? backend_.captureGraph(stream.v) : 0;
}

template <typename C>
std::optional<uint64_t> Dispatcher::pacedStream(const typename C::in::tuple& ins) {
  proto::Stream stream;
  if constexpr (std::is_same_v<C, proto::calls::LaunchKernel>)
    stream = std::get<8>(ins);
  else if constexpr (std::is_same_v<C, proto::calls::GraphLaunch>)
    stream = std::get<1>(ins);
  else
    return std::nullopt;
  if (!compute_ || !table_.hasStream(stream.v) || captureOf(stream) != 0) return std::nullopt;
  if (backend_.openContext() != cu::kSuccess) return std::nullopt;  // (timing needs it; the launch then fails)
  return stream.v;
}

void Dispatcher::settleGraphMemory(uint64_t headroom) {
  if (!graph_memory_.active() && headroom == 0) return;
  uint64_t used = 0, reserved = 0;
  backend_.graphMemory(used, reserved);
  graph_memory_.settle(reserved, headroom);
}

template <typename C>
void Dispatcher::dispatch(const proto::FrameHeader& h) {
  typename C::in::tuple ins;
  typename C::out::tuple outs{};
  proto::Reader r(payload_.data(), payload_.size());
  bool ok = std::apply([&](auto&... v) { return r.getAll(v...); }, ins);
  if (!ok || !r.atEnd())
    throw Violation{std::string("malformed ") + C::kName + " request (" + std::to_string(h.length) + " bytes)"};

  const bool wants_reply = h.flags & proto::kWantsReply;
  spdlog::trace("{} (request {}, {} bytes)", C::kName, h.seq, h.length);
  Status st = wants_reply ? takeLatched(h) : 0;
  if (!freed_imported_.empty()) freed_imported_.settle();  // (what importers let go of since)
  if (st == 0) {  // else an earlier asynchronous call's failure is the reply, and this call does not run
    const std::optional<uint64_t> paced = pacedStream<C>(ins);
    if (paced) compute_->beforeLaunch(*paced);
    st = execute<C>(ins, outs);
    if (paced) compute_->afterLaunch(*paced);
    if constexpr (std::is_same_v<C, proto::calls::LaunchKernel> || std::is_same_v<C, proto::calls::GraphLaunch>)
      if (st == 0 && launches_) launches_->add(launch_slot_, 1);
    if constexpr (std::is_same_v<C, proto::calls::ModuleLoad>) {
      const proto::Blob& image = std::get<0>(ins);
      ++stats_.images_received;
      stats_.image_bytes_received += image.size;
      if (st == 0 && cache_) cache_->put(image.data, image.size);  // only images the device accepted
    }
  }
  // Every call that fails, at debug level: on a GPU, the first line with a driver's error says which
  // call the program's later error came from (gpu_check.sh runs its servers at this level).
  // (Not "not ready": an answer, which programs poll for.)
  if (st != 0 && st != cu::kNotReady)
    spdlog::debug("{} (request {}) returned {}{}", C::kName, h.seq, st, wants_reply ? "" : ", latched until the client waits");
  if (!wants_reply) {
    if (st != 0 && latched_ == 0) latched_ = st;
    return;
  }
  out_.clear();
  proto::Writer w(out_);
  w.put(st);
  std::apply([&](const auto&... o) { w.putAll(o...); }, outs);
  reply(h, out_);
}

Status Dispatcher::takeLatched(const proto::FrameHeader& h) {
  if (h.flags & proto::kAside) return 0;
  return std::exchange(latched_, 0);
}

std::unique_lock<std::mutex> Dispatcher::replyLock() {
  auto lock = alive_.replyLock();
  if (output_) output_->sendPending(*transport_);
  return lock;
}

void Dispatcher::reply(const proto::FrameHeader& h, const std::vector<uint8_t>& payload) {
  auto lock = replyLock();
  proto::sendFrame(*transport_, h.msg, proto::kIsReply, h.seq, payload.data(), payload.size());
}

void Dispatcher::replyStatus(const proto::FrameHeader& h, Status st) {
  auto lock = replyLock();
  proto::sendFrame(*transport_, h.msg, proto::kIsReply, h.seq, &st, sizeof st);
}

// Reply layout: `bytes` of data then the status (4 bytes) when the copy runs; the status alone when it
// is refused up front or its first chunk fails. Data streams in chunks so a large copy never needs a
// buffer of its size. The first chunk is copied before the reply starts: that copy waits for the work
// queued before it, however long, while kMsgAlive frames still go out; the rest stream without waits.
void Dispatcher::memcpyDtoH(const proto::FrameHeader& h) {
  uint64_t src = 0, bytes = 0, stream = 0;
  proto::Reader r(payload_.data(), payload_.size());
  if (!r.getAll(src, bytes, stream) || !r.atEnd())
    throw Violation{"malformed MemcpyDtoH request (" + std::to_string(h.length) + " bytes)"};
  if (!(h.flags & proto::kWantsReply)) throw Violation{"MemcpyDtoH without a reply"};

  Status st = takeLatched(h);
  if (st == 0 && !table_.hasStream(stream)) st = cu::kInvalidHandle;
  if (st == 0 && !table_.containsRange(src, bytes)) st = cu::kInvalidValue;
  if (st != 0) {
    replyStatus(h, st);
    return;
  }
  if (bytes + sizeof(Status) > UINT32_MAX) {
    replyStatus(h, cu::kInvalidValue);  // a single reply frame cannot carry it; the client splits larger copies
    return;
  }
  const uint64_t chunk = std::min<uint64_t>(bytes, proto::kBulkChunk);
  auto* staging = static_cast<uint8_t*>(backend_.stagingBuffer(chunk));
  if (bytes && (st = backend_.MemcpyDtoH(staging, src, chunk, stream)) != 0) {
    replyStatus(h, st);
    return;
  }
  auto lock = replyLock();
  proto::FrameHeader rh{static_cast<uint32_t>(bytes + sizeof(Status)), h.msg, proto::kIsReply, h.seq};
  // A write per chunk: the first carries the header too, the last the status (a copy of one chunk is one write).
  const proto::ConstBuffer status{&st, sizeof st};  // (st as it is when the last chunk goes)
  std::array<proto::ConstBuffer, 3> first{proto::ConstBuffer{&rh, sizeof rh}, proto::ConstBuffer{staging, chunk}, status};
  transport_->send(std::span(first).first(chunk == bytes ? 3 : 2));
  for (uint64_t off = chunk; off < bytes;) {
    uint64_t n = std::min<uint64_t>(bytes - off, chunk);
    if (st == 0) st = backend_.MemcpyDtoH(staging, src + off, n, stream);
    if (st != 0) std::memset(staging, 0, n);  // keep the promised length
    off += n;
    std::array<proto::ConstBuffer, 2> next{proto::ConstBuffer{staging, n}, status};
    transport_->send(std::span(next).first(off == bytes ? 2 : 1));
  }
}

// The client asks for liveness frames (protocol 2.2): payload u32 interval in ms, no reply.
void Dispatcher::alive(const proto::FrameHeader& h) {
  uint32_t interval_ms = 0;
  proto::Reader r(payload_.data(), payload_.size());
  if (!r.get(interval_ms) || !r.atEnd() || (h.flags & proto::kWantsReply))
    throw Violation{"malformed Alive request (" + std::to_string(h.length) + " bytes)"};
  alive_.start(interval_ms);
}

void Dispatcher::moduleLoadCached(const proto::FrameHeader& h) {
  std::string hash;
  uint32_t kind = 0;
  proto::Reader r(payload_.data(), payload_.size());
  if (!r.getAll(hash, kind) || !r.atEnd() || hash.size() != 32)
    throw Violation{"malformed ModuleLoadCached request (" + std::to_string(h.length) + " bytes)"};
  if (!(h.flags & proto::kWantsReply)) throw Violation{"ModuleLoadCached without a reply"};
  Status st = takeLatched(h);
  proto::calls::ModuleLoad::out::tuple out;
  if (st == 0) {
    ImageHash key;
    std::memcpy(key.data(), hash.data(), key.size());
    std::optional<std::vector<uint8_t>> image = cache_ ? cache_->get(key) : std::nullopt;
    if (!image) {
      st = cu::kNotFound;
    } else {
      proto::calls::ModuleLoad::in::tuple in{proto::Blob{image->data(), image->size()}, kind};
      st = execute<proto::calls::ModuleLoad>(in, out);
      if (st == 0) {
        ++stats_.images_from_cache;
        stats_.image_bytes_from_cache += image->size();
      }
    }
  }
  out_.clear();
  proto::Writer w(out_);
  w.put(st);
  w.put(std::get<0>(out).handle);
  reply(h, out_);
}

// The client asks to move to shared memory (transport_switch.h). Answered on TCP; then, if the client
// comes, every later frame both ways goes over the new transport.
void Dispatcher::switchTransport(const proto::FrameHeader& h) {
  uint32_t kind = 0;
  std::string host;
  proto::Reader r(payload_.data(), payload_.size());
  if (!r.getAll(kind, host) || !r.atEnd() || !(h.flags & proto::kWantsReply))
    throw Violation{"malformed SwitchTransport request (" + std::to_string(h.length) + " bytes)"};
  TransportSwitch move;
  std::string name;
  std::vector<uint8_t> token;
  Status st = moved_ ? cu::kIllegalState : move.offer(kind, host, name, token);
  out_.clear();
  proto::Writer w(out_);
  w.putAll(st, name, token);
  reply(h, out_);
  if (st != cu::kSuccess) return;
  bool shm = kind == proto::kTransportShm;
  std::unique_ptr<proto::Transport> next = move.complete(*transport_, shm ? backend_.makeHostPool() : -1);
  if (!next) return;
  next->setStallTimeout(stall_ms_);
  const char* where = shm ? "shared memory" : "RDMA (UCX)";
  spdlog::info("client {} moved to {} ({})", transport_->peer(), where, next->peer());
  std::lock_guard lock(transport_mu_);
  moved_ = std::move(next);
  transport_ = moved_.get();
  if (!stopped_.empty()) transport_->shutdown();
  stats_.transport = shm ? "over shared memory" : "over RDMA (UCX)";
  alive_.use(*transport_);
}

void Dispatcher::handle(const proto::FrameHeader& h) {
  switch (h.msg) {
#define X(name, number, mode, ins, outs) \
  case number: return dispatch<proto::calls::name>(h);
#include "gpool/protocol/calls.def"
#undef X
    case proto::kMsgMemcpyDtoH:
      return memcpyDtoH(h);
    case proto::kMsgAlive:
      return alive(h);
    case proto::calls::ModuleLoadCached::id:
      return moduleLoadCached(h);
    case proto::kMsgSwitchTransport:
      return switchTransport(h);
    case proto::kMsgOutput:  // the client wants the worker's standard output (protocol 2.5)
      if (h.length != 0 || (h.flags & proto::kWantsReply)) throw Violation{"malformed Output request"};
      if (output_) output_->enable();
      return;
    case proto::kMsgEnded:  // the client wants to know why the worker ends the connection (protocol 2.11)
      if (h.length != 0 || (h.flags & proto::kWantsReply)) throw Violation{"malformed Ended request"};
      tell_end_ = true;
      return;
    default:
      spdlog::warn("unknown message number {:#06x} ({} bytes) from {}", h.msg, h.length, transport_->peer());
      if (h.flags & proto::kWantsReply) replyStatus(h, cu::kNotSupported);
  }
}

ServeResult Dispatcher::serve() {
  ServeResult& result = stats_;
  try {
    for (;;) {
      proto::FrameHeader h = proto::recvHeader(*transport_, proto::kMaxRequestPayload);
      uint8_t* buffer = backend_.frameBuffer(h.length);
      if (h.length) transport_->recv(buffer, h.length);
      payload_ = {buffer, h.length};
      if (h.flags & proto::kIsReply) throw Violation{"client sent a reply frame"};
      ++result.frames;
      alive_.begin();
      handle(h);
      alive_.end();
    }
  } catch (const proto::TransportStalled& e) {
    result.reason = e.what();  // the connection is dropped
  } catch (const proto::TransportError& e) {
    result.clean = true;
    result.reason = e.what();
  } catch (const proto::ProtocolError& e) {
    result.reason = std::string("protocol violation: ") + e.what();
  } catch (const Violation& v) {
    result.reason = "protocol violation: " + v.what;
  }
  std::lock_guard lock(transport_mu_);
  if (!stopped_.empty()) result.clean = false, result.reason = stopped_;
  if (!result.clean) transport_->shutdown();  // a violator loses its connection
  return result;
}

void Dispatcher::stop(const std::string& why) {
  std::lock_guard lock(transport_mu_);
  stopped_ = why.empty() ? std::string("stopped") : why.substr(0, proto::kMaxEndedReason);
  std::future<void> told;
  if (tell_end_) {
    told = std::async(std::launch::async, [this] { tellEnded(stopped_); });
    told.wait_for(std::chrono::milliseconds(kTellEndedMs));  // a client that reads nothing is not waited for
  }
  transport_->shutdown();
}  // (told's end waits for its send, which the shutdown ended if the client did not take it)

void Dispatcher::tellEnded(const std::string& why) {
  std::vector<uint8_t> payload;
  proto::Writer(payload).putAll(why);
  try {
    auto lock = replyLock();  // (after the output the client has not had yet)
    proto::sendFrame(*transport_, proto::kMsgEnded, 0, 0, payload.data(), payload.size());
  } catch (const std::exception& e) {
    spdlog::debug("could not tell the client why its connection ends: {}", e.what());
  }
}

}  // namespace gpool::worker
