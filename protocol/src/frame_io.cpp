// Frame encoding helpers shared by the client library and the worker.
#include "gpool/protocol/frame_io.h"

#include "gpool/protocol/calls.h"

#include <array>

namespace gpool::proto {

size_t beginFrame(std::vector<uint8_t>& out) {
  size_t at = out.size();
  out.resize(at + sizeof(FrameHeader));
  return at;
}

void finishFrame(std::vector<uint8_t>& out, size_t at, uint16_t msg, uint16_t flags, uint64_t seq) {
  FrameHeader h{static_cast<uint32_t>(out.size() - at - sizeof(FrameHeader)), msg, flags, seq};
  std::memcpy(out.data() + at, &h, sizeof h);
}

void appendFrame(std::vector<uint8_t>& out, uint16_t msg, uint16_t flags, uint64_t seq,
                 const std::vector<uint8_t>& payload) {
  size_t at = beginFrame(out);
  out.insert(out.end(), payload.begin(), payload.end());
  finishFrame(out, at, msg, flags, seq);
}

void sendFrame(Transport& t, uint16_t msg, uint16_t flags, uint64_t seq, const void* payload, size_t n) {
  FrameHeader h{static_cast<uint32_t>(n), msg, flags, seq};
  std::array<ConstBuffer, 2> bufs{ConstBuffer{&h, sizeof h}, ConstBuffer{payload, n}};
  t.send(std::span<const ConstBuffer>(bufs.data(), n ? 2 : 1));
}

FrameHeader recvHeader(Transport& t, uint32_t max_payload, bool idle_ok) {
  FrameHeader h{};
  t.recv(&h, sizeof h, idle_ok);
  if (h.length > max_payload)
    throw ProtocolError("frame of " + std::to_string(h.length) + " bytes exceeds the limit of " +
                        std::to_string(max_payload));
  return h;
}

FrameHeader recvFrame(Transport& t, std::vector<uint8_t>& payload, uint32_t max_payload, bool idle_ok) {
  FrameHeader h = recvHeader(t, max_payload, idle_ok);
  payload.resize(h.length);
  if (h.length) t.recv(payload.data(), h.length);
  return h;
}

const char* messageName(uint16_t msg) {
  switch (msg) {
    case kMsgHello: return "Hello";
    case kMsgAlive: return "Alive";
    case kMsgMemcpyDtoH: return "MemcpyDtoH";
    case calls::ModuleLoadCached::id: return "ModuleLoadCached";
#define X(name, number, mode, ins, outs) \
  case number: return #name;
#include "gpool/protocol/calls.def"
#undef X
    default: return nullptr;
  }
}

}  // namespace gpool::proto
