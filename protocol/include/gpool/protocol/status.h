// CUresult values by name, for code that must not include cuda.h (the protocol, the worker's checks,
// the client's connection, tests). server/worker/cuda_forward.h checks them against cuda.h.
#pragma once

#include <cstdint>

namespace gpool::proto {

// Status values on the wire are CUresult numbers.
using Status = int32_t;

namespace cu {
inline constexpr Status kSuccess = 0;
inline constexpr Status kInvalidValue = 1;
inline constexpr Status kOutOfMemory = 2;
inline constexpr Status kNotInitialized = 3;
inline constexpr Status kDeviceUnavailable = 46;
inline constexpr Status kNoDevice = 100;
inline constexpr Status kInvalidDevice = 101;
inline constexpr Status kInvalidImage = 200;
inline constexpr Status kInvalidContext = 201;
inline constexpr Status kInvalidHandle = 400;
inline constexpr Status kNotFound = 500;
inline constexpr Status kNotReady = 600;
inline constexpr Status kPeerAccessUnsupported = 217;
inline constexpr Status kNotPermitted = 800;
inline constexpr Status kNotSupported = 801;
inline constexpr Status kStreamCaptureUnsupported = 900;
inline constexpr Status kStreamCaptureInvalidated = 901;
inline constexpr Status kInvalidResourceConfiguration = 915;
inline constexpr Status kIllegalState = 401;
}  // namespace cu

}  // namespace gpool::proto
