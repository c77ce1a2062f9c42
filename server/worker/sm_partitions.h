// Green contexts' SM partitions, as both backends make them: a client's resource is a recipe (its source,
// the split, which part), and GreenCtxCreate names the parts of one split it is made of. Which of those
// parts a request may name is decided here, once for both backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpool/protocol/fields.h"
#include "gpool/protocol/status.h"

namespace gpool::worker {

// The indexes into a split's parts (its `groups` groups, then the remainder) that `picks` names: a group's
// index or SmSplit::kRemainder. A source not split has one part, named 0. An empty, repeated or unknown
// pick is CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, as the driver answers a descriptor of resources that
// do not belong together.
inline proto::Status pickParts(bool split, size_t groups, const std::vector<uint32_t>& picks, std::vector<size_t>& out) {
  const size_t parts = split ? groups + 1 : 1;
  const size_t named = split ? groups : 1;  // parts a plain index may name
  std::vector<bool> taken(parts, false);
  out.clear();
  for (uint32_t p : picks) {
    const size_t i = split && p == proto::SmSplit::kRemainder ? groups : p < named ? p : parts;
    if (i >= parts || taken[i]) return proto::cu::kInvalidResourceConfiguration;
    taken[i] = true;
    out.push_back(i);
  }
  return out.empty() ? proto::cu::kInvalidResourceConfiguration : proto::cu::kSuccess;
}

}  // namespace gpool::worker
