// Frames over a Transport: header + payload, with the size limits checked on receipt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpool/protocol/transport.h"
#include "gpool/protocol/wire.h"

namespace gpool::proto {

// Appends a complete frame (header + payload) to `out`; used to batch many small frames in one write.
void appendFrame(std::vector<uint8_t>& out, uint16_t msg, uint16_t flags, uint64_t seq,
                 const std::vector<uint8_t>& payload);
// Reserves a header in `out`, returns its offset; finishFrame fills it once the payload is appended.
size_t beginFrame(std::vector<uint8_t>& out);
void finishFrame(std::vector<uint8_t>& out, size_t at, uint16_t msg, uint16_t flags, uint64_t seq);

void sendFrame(Transport& t, uint16_t msg, uint16_t flags, uint64_t seq, const void* payload, size_t n);

// Reads one header; throws ProtocolError when the length exceeds max_payload.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// `idle_ok`: the header's first byte may take as long as it takes (Transport::recv).
FrameHeader recvHeader(Transport& t, uint32_t max_payload, bool idle_ok = true);
// Reads one whole frame into `payload` (resized).
FrameHeader recvFrame(Transport& t, std::vector<uint8_t>& payload, uint32_t max_payload, bool idle_ok = true);

}  // namespace gpool::proto
