// Connection: handshake, batching, replies and the loss of the server (see connection.h).
#include "connection.h"

#include <unistd.h>

#include "log.h"

namespace gpool::client {
namespace {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Connection::Connection(std::unique_ptr<proto::Transport> transport, std::string address, uint32_t device,
                       const std::string& token)
    : transport_(std::move(transport)), address_(std::move(address)) {
  proto::HelloRequest req;
  req.device = device;
  req.token = token;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  req.client = std::string(host) + " pid " + std::to_string(::getpid());
  auto payload = proto::encode(req);
  proto::sendFrame(*transport_, proto::kMsgHello, proto::kWantsReply, 0, payload.data(), payload.size());
  proto::FrameHeader h = proto::recvFrame(*transport_, reply_, 16u << 20);
  if (h.msg != proto::kMsgHello || !(h.flags & proto::kIsReply))
    throw proto::TransportError("gpool-server at " + address_ + " answered the handshake with message " + std::to_string(h.msg));
  auto hello = proto::decodeHelloReply(reply_);
  if (!hello) throw proto::TransportError("malformed handshake reply from gpool-server at " + address_);
  if (hello->status != 0)
    throw proto::TransportError("gpool-server at " + address_ + " refused the connection: " + hello->error);
  if (hello->devices.empty()) throw proto::TransportError("gpool-server at " + address_ + " offers no device");
  hello_ = std::move(*hello);
  flusher_ = std::thread([this] { flusherLoop(); });
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
  ++writes_;
  batch_.clear();
}

void Connection::awaitReply(uint16_t msg) {
  proto::FrameHeader h = proto::recvFrame(*transport_, reply_, proto::kMaxRequestPayload);
  if (!(h.flags & proto::kIsReply) || h.msg != msg || h.seq != seq_)
    throw proto::ProtocolError("unexpected frame from the worker (message " + std::to_string(h.msg) + ")");
}

int Connection::fail(const std::string& why) {
  if (!lost_) {
    GPOOL_LOG(Level::kError, "lost the connection to gpool-server at %s (%s); CUDA calls now fail with CUDA_ERROR_DEVICE_UNAVAILABLE",
              address_.c_str(), why.c_str());
    lost_ = kErrDeviceUnavailable;
    transport_->shutdown();
  }
  return lost_;
}

int Connection::flush() {
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
  std::lock_guard lock(mu_);
  if (lost_) return lost_;
  try {
    enqueue(proto::kMsgMemcpyDtoH, proto::kWantsReply, std::tuple<uint64_t, uint64_t, uint64_t>{src, bytes, stream});
    flushLocked();
    proto::FrameHeader h = proto::recvHeader(*transport_, UINT32_MAX);
    if (!(h.flags & proto::kIsReply) || h.msg != proto::kMsgMemcpyDtoH || h.seq != seq_)
      throw proto::ProtocolError("unexpected frame from the worker during a copy");
    proto::Status st = 0;
    if (h.length == sizeof st) {
      transport_->recv(&st, sizeof st);
      return st;
    }
    if (h.length != bytes + sizeof st) throw proto::ProtocolError("copy reply of the wrong length");
    transport_->recv(dst, bytes);
    transport_->recv(&st, sizeof st);
    return st;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

}  // namespace gpool::client
