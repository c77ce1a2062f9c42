// Connection: handshake, batching, replies and the loss of the server (see connection.h).
#include "connection.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>

#include "gpool/printable.h"
#include "gpool/protocol/driver_settings.h"
#include "host_work_order.h"
#include "log.h"
#include "transport_choice.h"

namespace gpool::client {
namespace {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// Set in the child of every fork once a connection exists: the child's calls then stop short of the
// parent's transports (connection.h, kErrForkedChild).
void Connection::markForkedChild() { forked_child_.store(true, std::memory_order_relaxed); }

int Connection::refuseInForkedChild() {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    static const char kWhy[] =
        "gpool: this process was forked from one that had used CUDA, and CUDA cannot be used in it (CUDA calls "
        "fail with CUDA_ERROR_NOT_INITIALIZED, as without gpool); start it with the 'spawn' start method, or "
        "exec a new program\n";
    [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, kWhy, sizeof kWhy - 1);  // no lock the fork may have left held
  }
  return kErrForkedChild;
}

Connection::Connection(std::unique_ptr<proto::Transport> transport, std::string address, uint32_t device,
                       const std::string& token, std::chrono::milliseconds worker_timeout)
    : transport_(std::move(transport)), address_(std::move(address)) {
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { ::pthread_atfork(nullptr, nullptr, markForkedChild); });
  transport_->setStallTimeout(static_cast<int>(kHandshakeTimeout.count()));
  proto::HelloRequest req;
  req.device = device;
  req.token = token;
  req.driver_env = proto::driverSettingsFromEnvironment();  // for the worker's driver (driver_settings.h)
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  req.client = std::string(host) + " pid " + std::to_string(::getpid());
  auto payload = proto::encode(req);
  proto::sendFrame(*transport_, proto::kMsgHello, proto::kWantsReply, 0, payload.data(), payload.size());
  proto::FrameHeader h;
  try {
    h = proto::recvFrame(*transport_, reply_, 16u << 20, /*idle_ok=*/false);
  } catch (const proto::TransportStalled&) {
    throw proto::TransportError("gpool-server at " + address_ + " did not complete the handshake within " +
                                std::to_string(kHandshakeTimeout.count() / 1000) + " s");
  }
  if (h.msg != proto::kMsgHello || !(h.flags & proto::kIsReply))
    throw proto::TransportError("gpool-server at " + address_ + " answered the handshake with message " + std::to_string(h.msg));
  auto hello = proto::decodeHelloReply(reply_);
  if (!hello) throw proto::TransportError("malformed handshake reply from gpool-server at " + address_);
  if (hello->status != 0)
    throw proto::TransportError("gpool-server at " + address_ + " refused the connection: " + hello->error);
  if (hello->devices.empty()) throw proto::TransportError("gpool-server at " + address_ + " offers no device");
  hello_ = std::move(*hello);
  Move moved = moveFromTcp(*transport_, address_, hello_.features);
  if (moved.transport) {
    tcp_ = std::move(transport_);  // kept open, unused: the worker reads the new transport only
    transport_ = std::move(moved.transport);
    transport_->setStallTimeout(static_cast<int>(kHandshakeTimeout.count()));
    kind_ = moved.kind;
    shares_memory_ = moved.shared_memory;
  } else {
    GPOOL_LOG(Level::kDebug, "worker at %s: over TCP (%s)", address_.c_str(), moved.why.c_str());
  }
  watchWorker(worker_timeout);
  if (hello_.features & proto::kFeatureOutput) proto::sendFrame(*transport_, proto::kMsgOutput, 0, 0, nullptr, 0);
  if (hello_.features & proto::kFeatureEnded) proto::sendFrame(*transport_, proto::kMsgEnded, 0, 0, nullptr, 0);
  flusher_ = std::thread([this] { flusherLoop(); });
  if (moved.pool >= 0) attachHostPool(moved.pool);
}

// Page-locked memory in the worker's pool (host_pool.h); without it, host memory stays emulated.
void Connection::attachHostPool(int fd) {
  auto pool = std::make_unique<HostPool>();
  std::string why;
  if (pool->attach(*this, fd, why)) {
    host_pool_ = std::move(pool);
    GPOOL_LOG(Level::kDebug, "worker at %s: page-locked host memory is shared with it", address_.c_str());
  } else {
    GPOOL_LOG(Level::kInfo, "worker at %s: page-locked host memory stays this process's (%s): kernels cannot use it, and "
              "copies from it go through the connection", address_.c_str(), why.c_str());
  }
}

// A worker that offers liveness frames is asked for one every quarter of the bound, and every wait on it
// (a reply, or a send it does not read) then ends after the bound without a word. An older worker, or a
// bound of 0: waits are unbounded, as before protocol 2.2.
void Connection::watchWorker(std::chrono::milliseconds timeout) {
  if (!(hello_.features & proto::kFeatureAlive) || timeout.count() <= 0) {
    transport_->setStallTimeout(0);
    return;
  }
  watch_ms_ = std::max<int64_t>(timeout.count(), 2 * proto::kMinAliveIntervalMs);
  auto interval = static_cast<uint32_t>(std::min<int64_t>(watch_ms_ / 4, proto::kMaxAliveIntervalMs));
  interval = std::max(interval, proto::kMinAliveIntervalMs);
  proto::sendFrame(*transport_, proto::kMsgAlive, 0, 0, &interval, sizeof interval);
  transport_->setStallTimeout(static_cast<int>(std::min<int64_t>(watch_ms_, INT32_MAX)));
}

Connection::~Connection() {
  stop_ = true;
  if (flusher_.joinable()) flusher_.join();
}

void Connection::flusherLoop() {
  while (!stop_) {
    std::this_thread::sleep_for(kFlushDelay);
    int64_t since = pending_since_.load(std::memory_order_relaxed);
    if (since == 0 || nowNs() - since < std::chrono::nanoseconds(kFlushDelay).count()) continue;
    std::lock_guard lock(mu_);
    if (lost_ || batch_.empty()) continue;
    try {
      flushLocked();
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }
}

void Connection::markPending() {
  if (pending_since_.load(std::memory_order_relaxed) == 0) pending_since_.store(nowNs(), std::memory_order_relaxed);
}

void Connection::flushLocked() {
  pending_since_.store(0, std::memory_order_relaxed);
  if (batch_.empty()) return;
  try {
    sendBatch();
  } catch (const proto::TransportStalled&) {
    throw proto::TransportError("the worker read nothing and said nothing for " + std::to_string(watch_ms_) +
                                " ms: it has stopped (GPOOL_WORKER_TIMEOUT sets this bound)");
  } catch (const proto::TransportError&) {
    send_failed_ = true;  // the worker closed the connection: what it sent before may still be unread
    throw;
  }
  ++writes_;
  batch_.clear();
}

void Connection::sendBatch() {
  publishRequests();
  if (direct_.data) {
    std::array<proto::ConstBuffer, 3> bufs{proto::ConstBuffer{batch_.data(), direct_at_},
                                           proto::ConstBuffer{direct_.data, direct_.size},
                                           proto::ConstBuffer{batch_.data() + direct_at_, batch_.size() - direct_at_}};
    direct_ = {};
    transport_->send(bufs);
  } else {
    proto::ConstBuffer b{batch_.data(), batch_.size()};
    transport_->send(std::span(&b, 1));
  }
}

// What the GPU printed (the worker's standard output, kMsgOutput) goes to this process's, where the
// program's own output goes, as the driver would write it on the GPU's host.
void Connection::relayOutput(uint32_t length) {
  if (length > proto::kMaxOutputFrame) throw proto::ProtocolError("an Output frame from the worker is too long");
  std::vector<uint8_t> bytes(length);
  if (length) transport_->recv(bytes.data(), length);
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  std::fflush(stdout);
}

// Why the worker ends the connection (kMsgEnded), as it said.
std::string Connection::endedBecause(uint32_t length) {
  if (length > proto::kMaxEndedReason + sizeof(uint32_t)) throw proto::ProtocolError("an Ended frame from the worker is too long");
  std::vector<uint8_t> bytes(length);
  if (length) transport_->recv(bytes.data(), length);
  proto::Reader r(bytes.data(), bytes.size());
  std::string why;
  if (!r.getAll(why) || !r.atEnd()) throw proto::ProtocolError("malformed Ended frame from the worker");
  return "the worker ended the connection: " + printable(why);
}

// The next frame that is not a liveness frame (nor the worker's output, which it passes on). Each wait is bounded by the worker timeout: a worker
// that is busy says so in time, so silence means it stopped.
proto::FrameHeader Connection::recvReplyHeader(uint32_t max_payload) {
  for (;;) {
    proto::FrameHeader h;
    try {
      h = proto::recvHeader(*transport_, max_payload, /*idle_ok=*/false);
    } catch (const proto::TransportStalled&) {
      throw proto::TransportError("the worker sent nothing for " + std::to_string(watch_ms_) +
                                  " ms while a call waited: it has stopped (GPOOL_WORKER_TIMEOUT sets this bound)");
    }
    if (h.msg == proto::kMsgOutput && !(h.flags & proto::kIsReply)) {
      relayOutput(h.length);
      continue;
    }
    if (h.msg == proto::kMsgEnded && !(h.flags & proto::kIsReply)) throw proto::TransportError(endedBecause(h.length));
    if (h.msg != proto::kMsgAlive || (h.flags & proto::kIsReply)) {
      acquireHostWork();
      return h;
    }
    if (h.length != 0) throw proto::ProtocolError("malformed Alive frame from the worker");
    ++alive_frames_;
  }
}

void Connection::awaitReply(uint16_t msg) {
  proto::FrameHeader h = recvReplyHeader(proto::kMaxRequestPayload);
  reply_.resize(h.length);
  if (h.length) transport_->recv(reply_.data(), h.length);
  if (!(h.flags & proto::kIsReply) || h.msg != msg || h.seq != seq_)
    throw proto::ProtocolError("unexpected frame from the worker (message " + std::to_string(h.msg) + ")");
}

// After a send failed because the worker closed the connection: the reason it gave (kMsgEnded) may still
// wait unread, behind replies to calls the program never waited for. Reads what the worker sent before it
// closed (finite: the connection is gone), passes its output on, and returns that reason, or `why`.
std::string Connection::reasonLeftUnread(const std::string& why) {
  constexpr int kMostFrames = 1 << 16;
  std::vector<uint8_t> skipped(64 << 10);
  try {
    for (int frames = 0; frames < kMostFrames; ++frames) {
      proto::FrameHeader h = proto::recvHeader(*transport_, UINT32_MAX, /*idle_ok=*/false);
      if (h.msg == proto::kMsgEnded && !(h.flags & proto::kIsReply)) return endedBecause(h.length);
      if (h.msg == proto::kMsgOutput && !(h.flags & proto::kIsReply)) {
        relayOutput(h.length);
        continue;
      }
      for (uint64_t left = h.length; left;) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(left, skipped.size()));
        transport_->recv(skipped.data(), n);
        left -= n;
      }
    }
  } catch (const std::exception&) {  // (the end of what it sent, or a frame cut short)
  }
  return why;
}

int Connection::fail(const std::string& said) {
  if (!lost_) {
    const std::string why = send_failed_ ? reasonLeftUnread(said) : said;
    GPOOL_LOG(Level::kError, "lost the connection to gpool-server at %s (%s); CUDA calls now fail with CUDA_ERROR_DEVICE_UNAVAILABLE",
              address_.c_str(), why.c_str());
    lost_ = kErrDeviceUnavailable;
    transport_->shutdown();
  }
  return lost_;
}

int Connection::flush() {
  if (forkedChild()) return refuseInForkedChild();
  std::lock_guard lock(mu_);
  if (lost_) return lost_;
  try {
    flushLocked();
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

int Connection::memcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) {
  if (index_ >= 0) {
    std::tuple<proto::Stream> s{stream};
    if (int st = ownHandles(s)) return st;
    stream = std::get<0>(s);
  }
  if (forkedChild()) return refuseInForkedChild();
  std::lock_guard lock(mu_);
  if (lost_) return lost_;
  try {
    profile::WaitTimer timer;
    enqueue(proto::kMsgMemcpyDtoH, proto::kWantsReply | AsideScope::flag(), std::tuple<uint64_t, uint64_t, uint64_t>{src, bytes, stream});
    const size_t sent = frame_bytes_;
    flushLocked();
    proto::FrameHeader h = recvReplyHeader(UINT32_MAX);
    if (!(h.flags & proto::kIsReply) || h.msg != proto::kMsgMemcpyDtoH || h.seq != seq_)
      throw proto::ProtocolError("unexpected frame from the worker during a copy");
    proto::Status st = 0;
    if (h.length != sizeof st && h.length != bytes + sizeof st) throw proto::ProtocolError("copy reply of the wrong length");
    if (h.length != sizeof st) transport_->recv(dst, bytes);
    transport_->recv(&st, sizeof st);
    timer.done(proto::kMsgMemcpyDtoH, sent, sizeof h + h.length);
    return st;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

}  // namespace gpool::client
