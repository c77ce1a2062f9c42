// The client's one connection to its worker: an ordered channel where asynchronous calls are batched
// and fire-and-forget, and calls that need a value wait for their reply (ARCHITECTURE.md §3).
// Thread-safe: calls from any thread are serialised in issue order.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "call_profile.h"
#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/handshake.h"
#include "gpool/protocol/transport.h"
#include "handle_tags.h"
#include "host_pool.h"

namespace gpool::client {

// CUresult values the connection itself produces.
inline constexpr int kErrNoDevice = proto::cu::kNoDevice;                    // never connected
inline constexpr int kErrDeviceUnavailable = proto::cu::kDeviceUnavailable;  // connection lost
// In a child forked from a process that had connected (Python's multiprocessing, PyTorch's DataLoader
// workers): CUDA's state is not the child's, and its calls fail with CUDA_ERROR_NOT_INITIALIZED, as CUDA's
// do there. The child shares the parent's sockets and rings and must never use them.
inline constexpr int kErrForkedChild = proto::cu::kNotInitialized;

class Connection;

// Maps another device's context-independent handle (a library, or one of its kernels) to this
// connection's copy of it, loading the library here first if need be (cross_device.h).
class ForeignHandles {
 public:
  virtual ~ForeignHandles() = default;
  // The handle on `here` (marked as its own), or 0 when `handle` has no copy there.
  virtual uint64_t translate(Connection& here, uint64_t handle, tags::HandleClass what) = 0;
};

// While one is alive, the requests that wait which this thread sends go aside (proto::kAside): the client
// library asks them for itself (handles to copy between devices, page-locked memory it registers), so the
// worker answers them with their own status and keeps an earlier asynchronous failure for the program's
// next wait, which a reply of gpool's own would otherwise have taken and dropped.
class AsideScope {
 public:
  AsideScope() : was_(active_) { active_ = true; }
  ~AsideScope() { active_ = was_; }
  AsideScope(const AsideScope&) = delete;
  AsideScope& operator=(const AsideScope&) = delete;
  static uint16_t flag() { return active_ ? proto::kAside : 0; }

 private:
  static inline thread_local bool active_ = false;
  bool was_;
};

class Connection {
 public:
  // How long the handshake may take (the server starts a worker, which opens its device).
  static constexpr std::chrono::milliseconds kHandshakeTimeout{120000};
  // How long a call may wait without a word from the worker before the worker counts as stopped
  // (GPOOL_WORKER_TIMEOUT). A worker busy with a long call says it runs every quarter of this.
  static constexpr std::chrono::milliseconds kDefaultWorkerTimeout{20000};

  // Connects and performs the handshake; throws proto::TransportError with a message naming the address.
  // `worker_timeout` 0: wait for a worker however long it is silent.
  Connection(std::unique_ptr<proto::Transport> transport, std::string address, uint32_t device, const std::string& token,
             std::chrono::milliseconds worker_timeout = kDefaultWorkerTimeout);
  ~Connection();

  const proto::HelloReply& hello() const { return hello_; }
  // "TCP", "shared memory" or "RDMA (UCX)" (transport_choice.h).
  const char* transportKind() const { return kind_; }
  // Whether the worker is on this host and the connection moved to shared memory.
  bool sharesMemory() const { return shares_memory_; }
  // The UUID this process shows for one of the worker's devices (State::connect keeps a lease's apart).
  void showUuid(uint32_t local, const std::array<uint8_t, 16>& uuid) { hello_.devices.at(local).uuid = uuid; }
  // Makes this connection the `index`th of a lease of several: its handles are marked (handle_tags.h).
  void joinLease(int index, ForeignHandles* foreign) {
    index_ = index;
    foreign_ = foreign;
  }
  int index() const { return index_ < 0 ? 0 : index_; }
  // A handle this worker handed out, as the program sees it.
  uint64_t marked(uint64_t handle) const { return index_ > 0 ? tags::mark(handle, index_) : handle; }
  const std::string& address() const { return address_; }

  // A call whose caller waits for status and reply fields.
  template <typename C, typename... A>
  int call(typename C::out::tuple& outs, A&&... args) {
    typename C::in::tuple ins{std::forward<A>(args)...};
    if (index_ >= 0)
      if (int st = ownHandles(ins)) return st;
    if (forkedChild()) return refuseInForkedChild();
    std::lock_guard lock(mu_);
    if (lost_) return lost_;
    try {
      profile::WaitTimer timer;
      enqueue(C::id, proto::kWantsReply | AsideScope::flag(), ins);
      const size_t sent = frame_bytes_;
      flushLocked();
      awaitReply(C::id);
      timer.done(C::id, sent, sizeof(proto::FrameHeader) + reply_.size());
      proto::Reader r(reply_.data(), reply_.size());
      proto::Status st = 0;
      bool ok = r.get(st) && std::apply([&](auto&... o) { return r.getAll(o...); }, outs) && r.atEnd();
      if (!ok || (index_ >= 0 && !markHandles(outs))) return fail("malformed reply to " + std::string(C::kName));
      return st;
    } catch (const std::exception& e) {
      return fail(e.what());
    }
  }
  template <typename C, typename... A>
  int call(A&&... args) {
    static_assert(std::tuple_size_v<typename C::out::tuple> == 0, "this call has reply fields");
    std::tuple<> none;
    return call<C>(none, std::forward<A>(args)...);
  }

  // Fire-and-forget on the ordered channel: success now, a failure comes back from a later waiting call.
  template <typename C, typename... A>
  int post(A&&... args) {
    typename C::in::tuple ins{std::forward<A>(args)...};
    if (index_ >= 0)
      if (int st = ownHandles(ins)) return st;
    if (forkedChild()) return refuseInForkedChild();
    std::lock_guard lock(mu_);
    if (lost_) return lost_;
    try {
      bool direct = enqueue(C::id, 0, ins);
      profile::posted(C::id, frame_bytes_);
      if (direct || batch_.size() >= kBatchBytes) flushLocked();
      else markPending();
      return 0;
    } catch (const std::exception& e) {
      return fail(e.what());
    }
  }

  // Page-locked host memory shared with the worker (host_pool.h); null without (TCP, or no address suited).
  HostPool* hostPool() { return host_pool_.get(); }

  // Device-to-host copy: the data streams straight into dst (custom message, docs/protocol.md).
  int memcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream);
  // Sends whatever is batched now.
  int flush();
  // Non-zero once the connection is gone (or this is a forked child): every later call returns it.
  int lost() const { return forkedChild() ? refuseInForkedChild() : lost_; }
  // Whether this process is a child forked after a connection was made (then no connection is usable).
  static bool forkedChild() { return forked_child_.load(std::memory_order_relaxed); }
  // Says once, in a forked child, why its CUDA calls fail; returns kErrForkedChild. Never touches the
  // transport or a lock the parent's threads may have held at the fork.
  static int refuseInForkedChild();

  // Statistics for tests and benchmarks.
  uint64_t framesSent() const { return frames_sent_; }
  uint64_t writes() const { return writes_; }
  uint64_t aliveFrames() const { return alive_frames_; }
  bool watchesWorker() const { return watch_ms_ > 0; }

 private:
  // In a lease of several: strips this connection's mark from a request's handles and maps foreign
  // libraries and kernels; another device's handle of any other kind is refused (CUDA_ERROR_INVALID_HANDLE).
  template <typename Tuple>
  int ownHandles(Tuple& ins) {
    int st = 0;
    auto own = [&](uint64_t& h, tags::HandleClass what) {
      int from = tags::owner(h);
      if (st || from < 0) return;
      if (from != index_ && what != tags::HandleClass::kContextBound && foreign_) h = foreign_->translate(*this, h, what);
      if (tags::owner(h) == index_) h = tags::strip(h);
      else st = proto::cu::kInvalidHandle;
    };
    tags::forEachHandleIn(ins, own);
    return st;
  }
  // Marks a reply's handles as this connection's; false when the worker sent a value that is no handle.
  template <typename Tuple>
  bool markHandles(Tuple& outs) {
    bool ok = true;
    auto mark = [&](uint64_t& h, tags::HandleClass) {
      if (tags::strip(h) != h) ok = false;
      h = tags::mark(h, index_);
    };
    tags::forEachHandleIn(outs, mark);
    return ok;
  }
  static constexpr size_t kBatchBytes = 64 * 1024;      // flush when this much is batched
  static constexpr size_t kDirectBytes = 64 * 1024;     // larger blobs are sent from the caller's memory
  static constexpr auto kFlushDelay = std::chrono::microseconds(500);  // time bound on batching

  template <typename Tuple>
  bool enqueue(uint16_t msg, uint16_t flags, const Tuple& ins) {
    size_t at = proto::beginFrame(batch_);
    proto::Writer w(batch_);
    bool direct = false;
    std::apply([&](const auto&... v) { (putField(w, v, direct), ...); }, ins);
    uint64_t extra = direct ? direct_.size : 0;
    proto::FrameHeader h{static_cast<uint32_t>(batch_.size() - at - sizeof(proto::FrameHeader) + extra), msg, flags, ++seq_};
    std::memcpy(batch_.data() + at, &h, sizeof h);
    ++frames_sent_;
    frame_bytes_ = sizeof h + h.length;
    return direct;
  }
  template <typename T>
  void putField(proto::Writer& w, const T& v, bool& direct) {
    if constexpr (proto::WireStruct<T>) {
      std::apply([&](const auto&... f) { (putField(w, f, direct), ...); }, v.wireFields());
      return;
    } else if constexpr (std::is_same_v<T, proto::Blob>) {
      if (v.size >= kDirectBytes && !direct) {
        w.put<uint64_t>(v.size);
        direct = true;  // the bytes go out from the caller's memory, between the two halves of the batch
        direct_ = v;
        direct_at_ = batch_.size();
        return;
      }
    }
    w.put(v);
  }
  void flushLocked();
  void sendBatch();
  void awaitReply(uint16_t msg);
  proto::FrameHeader recvReplyHeader(uint32_t max_payload);
  void watchWorker(std::chrono::milliseconds timeout);
  void relayOutput(uint32_t length);  // an Output frame's bytes, to this process's standard output
  std::string endedBecause(uint32_t length);  // an Ended frame's reason (kMsgEnded)
  void markPending();
  int fail(const std::string& why);
  std::string reasonLeftUnread(const std::string& why);
  static void markForkedChild();  // the pthread_atfork child handler
  static inline std::atomic<bool> forked_child_{false};
  void flusherLoop();
  void attachHostPool(int fd);

  std::mutex mu_;
  std::unique_ptr<proto::Transport> transport_;
  std::unique_ptr<proto::Transport> tcp_;  // the handshake's, once the connection moved off it
  const char* kind_ = "TCP";
  bool shares_memory_ = false;
  std::string address_;
  proto::HelloReply hello_;
  std::vector<uint8_t> batch_;
  size_t frame_bytes_ = 0;  // the last frame enqueued, header included (for GPOOL_PROFILE)
  std::vector<uint8_t> reply_;
  proto::Blob direct_{};
  size_t direct_at_ = 0;
  uint64_t seq_ = 0;
  int lost_ = 0;
  bool send_failed_ = false;  // a send found the connection closed (reasonLeftUnread)
  std::atomic<int64_t> pending_since_{0};  // steady-clock ns of the oldest unsent frame; 0: none
  std::atomic<bool> stop_{false};
  std::thread flusher_;
  uint64_t frames_sent_ = 0;
  uint64_t writes_ = 0;
  uint64_t alive_frames_ = 0;
  int64_t watch_ms_ = 0;  // the worker's silence bound while a call waits; 0: none
  int index_ = -1;        // this connection's place in a lease of several; -1: the only one
  ForeignHandles* foreign_ = nullptr;
  std::unique_ptr<HostPool> host_pool_;  // destroyed before the transport: its unmapping needs no call
};

}  // namespace gpool::client
