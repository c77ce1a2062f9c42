// CUDA arrays in the client library (api_array.cpp): the shape of each array this process made, and
// copies of one slice's rectangle between an array and host rows, device memory or another array. The
// 2D/3D copies (api_memory_2d.cpp) send their array ends here.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "gpool/protocol/fields.h"

namespace gpool::client::arrays {

// The shape of an array this process created (false: not one of them).
bool shapeOf(uint64_t array, proto::ArrayShape& out);
// `height` rows of `width` bytes, host rows `pitch` bytes apart.
CUresult hostToArray(const proto::ArrayRect& dst, const uint8_t* src, uint64_t pitch, uint64_t stream, bool async);
CUresult arrayToHost(const proto::ArrayRect& src, uint8_t* dst, uint64_t pitch, uint64_t stream);
CUresult deviceToArray(const proto::ArrayRect& dst, const proto::DevRect& src, uint64_t stream, bool async);
CUresult arrayToDevice(const proto::DevRect& dst, const proto::ArrayRect& src, uint64_t stream, bool async);
CUresult arrayToArray(const proto::ArrayRect& dst, const proto::ArrayRect& src, uint64_t stream, bool async);

}  // namespace gpool::client::arrays
