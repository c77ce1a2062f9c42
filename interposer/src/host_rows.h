// Rows of this process's memory as copies move them: packed one after another for the wire, and, for
// copies the worker captured (captured_copies.h), which rows each one reads or writes, with the answers to
// the worker's requests for them on the host-function channel. A request names a copy by id; rows no
// registered copy has are never read or written.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/transport.h"

namespace gpool::client {

// `height` rows of `width` bytes, `pitch` apart at `rows`, into `packed` one after another; and back.
inline void packRows(uint8_t* packed, const uint8_t* rows, uint64_t pitch, uint64_t width, uint64_t height) {
  for (uint64_t y = 0; y < height; ++y) std::memcpy(packed + y * width, rows + y * pitch, width);
}
inline void unpackRows(uint8_t* rows, uint64_t pitch, const uint8_t* packed, uint64_t width, uint64_t height) {
  for (uint64_t y = 0; y < height; ++y) std::memcpy(rows + y * pitch, packed + y * width, width);
}
// Rows per message, so that one message's packed rows stay within a bulk chunk.
inline uint64_t rowsPerMessage(uint64_t width) { return std::max<uint64_t>(1, proto::kBulkChunk / std::max<uint64_t>(width, 1)); }

// `height` rows of `width` bytes, `pitch` apart, from `addr`.
struct HostRows {
  uint64_t addr = 0, pitch = 0, width = 0, height = 0;
  uint64_t bytes() const { return width * height; }
};

// Registers rows for a copy and returns its id; forgets them again.
uint64_t registerHostRows(const HostRows& rows);
void forgetHostRows(uint64_t id);

// Answers the worker's request `h` (kMsgHostRead: the rows, packed; kMsgHostWrite: writes them and answers
// the id) after reading its payload; false for anything else, a copy it does not know, or a length that is
// not the copy's (the caller then closes the channel).
bool serveHostRows(proto::Transport& channel, const proto::FrameHeader& h);

}  // namespace gpool::client
