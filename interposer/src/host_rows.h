// The host side of copies the worker captured (captured_copies.h): which rows of this process's memory
// each one reads or writes, and the answers to the worker's requests for them on the host-function channel.
// A request names a copy by id; rows no registered copy has are never read or written.
#pragma once

#include <cstdint>

#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/transport.h"

namespace gpool::client {

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
