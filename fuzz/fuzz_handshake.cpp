// The handshake (protocol/src/handshake.cpp) and frame headers (frame_io.cpp): the first bytes any
// peer sends. Hello requests and replies decode or are refused; a header past the limit is refused.
#include <cstdint>
#include <vector>

#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/handshake.h"
#include "gpool/protocol/loopback_transport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpool::proto;
  std::vector<uint8_t> payload(data, data + size);
  if (auto r = decodeHelloRequest(payload)) encode(*r);
  if (auto r = decodeHelloReply(payload)) encode(*r);
  return 0;
}
