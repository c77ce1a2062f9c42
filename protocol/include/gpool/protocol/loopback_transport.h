// In-memory transport pair for tests, with fault injection: truncate, corrupt or cut the byte stream.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "gpool/protocol/transport.h"

namespace gpool::proto {

struct FaultPlan {
  // Counted over bytes sent by the faulty end. -1 disables a fault.
  int64_t close_after_bytes = -1;  // the stream ends after this many bytes (peer sees EOF)
  int64_t corrupt_at_byte = -1;    // this byte is XORed with 0xff
};


// Two connected ends; faults apply to what `first` sends.
std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>> makeLoopbackPair(FaultPlan faults = {});

}  // namespace gpool::proto
