// The host-function channel (host_callbacks.h).
#include "host_callbacks.h"

#include <spdlog/spdlog.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/shm_transport.h"

namespace gpool::worker {

proto::Status HostCallbacks::open(uint32_t& port, std::vector<uint8_t>& token) {
  std::lock_guard lock(mu_);
  if (opened_) return proto::cu::kIllegalState;  // one channel per worker
  proto::Status st = listener_.open(port, token);
  opened_ = st == proto::cu::kSuccess;
  if (opened_) startTaking();
  return st;
}

proto::Status HostCallbacks::openLocal(const std::string& client, std::string& name, std::vector<uint8_t>& token) {
  std::lock_guard lock(mu_);
  if (opened_) return proto::cu::kIllegalState;
  std::string here = proto::shmHostIdentity();
  if (here.empty() || client != here) return proto::cu::kNotSupported;
  proto::Status st = listener_.openLocal(name, token);
  opened_ = local_ = st == proto::cu::kSuccess;
  if (opened_) startTaking();
  return st;
}

HostCallbacks::~HostCallbacks() {
  listener_.cancel();
  if (taker_.joinable()) taker_.join();
}

void HostCallbacks::startTaking() {
  taker_ = std::thread([this] { taken_ = take(); });
}

std::unique_ptr<proto::Transport> HostCallbacks::take() {
  if (!local_) return listener_.accept(kAcceptTimeoutMs, "host-function channel");
  int link = listener_.acceptFd(kAcceptTimeoutMs, "host-function channel");
  if (link < 0) return nullptr;
  try {
    return proto::offerShm(link, proto::kShmChannelRingBytes, -1, "host-function channel (shared memory)");
  } catch (const proto::TransportError& e) {
    spdlog::warn("cannot give the client its host-function channel over shared memory: {}", e.what());
    return nullptr;
  }
}

bool HostCallbacks::accept() {
  if (taker_.joinable()) {
    taker_.join();
    channel_ = std::move(taken_);
    if (channel_) spdlog::info("host-function channel open over {}", local_ ? "shared memory" : "TCP");
  }
  return channel_ != nullptr;
}

bool HostCallbacks::exchange(uint16_t msg, uint64_t id, const uint8_t* data, uint64_t bytes, std::vector<uint8_t>& reply,
                             uint64_t reply_bytes) {
  if (!accept()) {
    if (!std::exchange(said_unreachable_, true))
      spdlog::warn("host function or copy {} is due, but the client has no host-function channel to this worker; host functions "
                   "and captured host copies are skipped", id);
    return false;
  }
  try {
    if (sizeof id + bytes > UINT32_MAX || reply_bytes > UINT32_MAX) throw proto::ProtocolError("a host copy too large for one frame");
    proto::FrameHeader h{static_cast<uint32_t>(sizeof id + bytes), msg, 0, id};
    std::array<proto::ConstBuffer, 3> parts{proto::ConstBuffer{&h, sizeof h}, proto::ConstBuffer{&id, sizeof id},
                                            proto::ConstBuffer{data, bytes}};
    channel_->send(std::span(parts.data(), bytes ? 3 : 2));
    proto::FrameHeader r = proto::recvFrame(*channel_, reply, static_cast<uint32_t>(reply_bytes));
    if (r.msg != msg || !(r.flags & proto::kIsReply) || r.seq != id || reply.size() != reply_bytes)
      throw proto::ProtocolError("unexpected answer on the host-function channel");
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("host-function channel closed: {}; later host functions and captured host copies are skipped", e.what());
    channel_.reset();
    return false;
  }
}

bool HostCallbacks::run(uint64_t id) {
  std::lock_guard lock(mu_);
  std::vector<uint8_t> reply;
  uint64_t done = 0;
  if (!exchange(proto::kMsgHostFuncDue, id, nullptr, 0, reply, sizeof done)) return false;
  std::memcpy(&done, reply.data(), sizeof done);
  if (done == id) return true;
  spdlog::warn("host-function channel closed: host function {} returned, {} was due; later host functions are skipped", done, id);
  channel_.reset();
  return false;
}

bool HostCallbacks::fetch(uint64_t id, uint8_t* into, uint64_t bytes) {
  std::lock_guard lock(mu_);
  std::vector<uint8_t> reply;
  if (!exchange(proto::kMsgHostRead, id, nullptr, 0, reply, bytes)) return false;
  if (bytes) std::memcpy(into, reply.data(), bytes);
  return true;
}

bool HostCallbacks::deliver(uint64_t id, const uint8_t* from, uint64_t bytes) {
  std::lock_guard lock(mu_);
  std::vector<uint8_t> reply;
  uint64_t done = 0;
  if (!exchange(proto::kMsgHostWrite, id, from, bytes, reply, sizeof done)) return false;
  std::memcpy(&done, reply.data(), sizeof done);
  return done == id;
}

}  // namespace gpool::worker
