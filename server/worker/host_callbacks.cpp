// The host-function channel (host_callbacks.h).
#include "host_callbacks.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <utility>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"

namespace gpool::worker {

proto::Status HostCallbacks::open(uint32_t& port, std::vector<uint8_t>& token) {
  std::lock_guard lock(mu_);
  if (opened_) return proto::cu::kIllegalState;  // one channel per worker
  proto::Status st = listener_.open(port, token);
  opened_ = st == proto::cu::kSuccess;
  return st;
}

bool HostCallbacks::accept() {
  if (!channel_ && listener_.isOpen()) channel_ = listener_.accept(kAcceptTimeoutMs, "host-function channel");
  return channel_ != nullptr;
}

bool HostCallbacks::run(uint64_t id) {
  std::lock_guard lock(mu_);
  if (!accept()) {
    if (!std::exchange(said_unreachable_, true))
      spdlog::warn("host function {} is due, but the client has no host-function channel to this worker; host functions are skipped", id);
    return false;
  }
  try {
    proto::sendFrame(*channel_, proto::kMsgHostFuncDue, 0, id, &id, sizeof id);
    std::vector<uint8_t> payload;
    proto::FrameHeader h = proto::recvFrame(*channel_, payload, sizeof id);
    uint64_t done = 0;
    if (h.msg != proto::kMsgHostFuncDue || !(h.flags & proto::kIsReply) || payload.size() != sizeof done)
      throw proto::ProtocolError("unexpected frame on the host-function channel");
    std::memcpy(&done, payload.data(), sizeof done);
    if (done != id) throw proto::ProtocolError("host function " + std::to_string(done) + " returned, " + std::to_string(id) + " was due");
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("host-function channel closed: {}; later host functions are skipped", e.what());
    channel_.reset();
    return false;
  }
}

}  // namespace gpool::worker
