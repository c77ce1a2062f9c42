// The generic forwarder of the cuda backend: a call whose handles the worker has checked and whose
// values the driver checks itself is forwarded by one line, GPOOL_FORWARD(CallName, cuDriverFunction).
// Driver functions take their results first (out-pointers) and then their arguments, as calls.def has
// them as reply and request fields; each field is cast to the driver's parameter type (handles to their
// pointer types, integers to enums and sizes), and the results are cast back when the call succeeds.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "gpool/protocol/calls.h"

namespace gpool::worker {

template <typename F>
struct DriverParams;
template <typename... P>
struct DriverParams<CUresult (*)(P...)> {
  using tuple = std::tuple<P...>;
};

template <typename P, typename A>
P toDriver(const A& a) {
  static_assert(!std::is_same_v<A, proto::Launchable>, "a CUkernel needs cuKernelGetFunction: write this call by hand");
  if constexpr (std::is_pointer_v<P>) return reinterpret_cast<P>(static_cast<uint64_t>(a));
  else return static_cast<P>(a);
}

template <typename O, typename T>
void fromDriver(O& out, const T& v) {
  if constexpr (std::is_pointer_v<T>) out = reinterpret_cast<uint64_t>(v);
  else if constexpr (std::is_arithmetic_v<O>) out = static_cast<O>(v);
  else out = static_cast<uint64_t>(v);
}

// Calls `fn` with the reply fields of call C as its leading out-pointers, then the request fields.
// `args` are C's request fields followed by its reply fields, as GPOOL_BACKEND_RUN passes them.
template <typename C, typename Fn, typename... A>
CUresult forward(Fn fn, A&... args) {
  using P = typename DriverParams<Fn>::tuple;
  constexpr size_t kIns = std::tuple_size_v<typename C::in::tuple>;
  constexpr size_t kOuts = sizeof...(A) - kIns;
  static_assert(std::tuple_size_v<P> == sizeof...(A), "the driver function's parameters do not match the call");
  auto all = std::forward_as_tuple(args...);
  return [&]<size_t... O, size_t... I>(std::index_sequence<O...>, std::index_sequence<I...>) {
    std::tuple<std::remove_pointer_t<std::tuple_element_t<O, P>>...> results{};
    CUresult r = fn(&std::get<O>(results)..., toDriver<std::tuple_element_t<kOuts + I, P>>(std::get<I>(all))...);
    if (r == CUDA_SUCCESS) (fromDriver(std::get<kIns + O>(all), std::get<O>(results)), ...);
    return r;
  }(std::make_index_sequence<kOuts>{}, std::make_index_sequence<kIns>{});
}

// In the cuda backend's class: the member for call `name`, forwarded to the driver's `fn`.
#define GPOOL_FORWARD(name, fn) \
  Status name(auto&... a) { return forward<proto::calls::name>(d_.fn##_, a...); }

}  // namespace gpool::worker

// status.h names CUresult values for code that does not include cuda.h; they must be cuda.h's.
static_assert(gpool::proto::cu::kInvalidValue == CUDA_ERROR_INVALID_VALUE);
static_assert(gpool::proto::cu::kOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(gpool::proto::cu::kNotInitialized == CUDA_ERROR_NOT_INITIALIZED);
static_assert(gpool::proto::cu::kDeviceUnavailable == CUDA_ERROR_DEVICE_UNAVAILABLE);
static_assert(gpool::proto::cu::kNoDevice == CUDA_ERROR_NO_DEVICE);
static_assert(gpool::proto::cu::kInvalidDevice == CUDA_ERROR_INVALID_DEVICE);
static_assert(gpool::proto::cu::kInvalidImage == CUDA_ERROR_INVALID_IMAGE);
static_assert(gpool::proto::cu::kInvalidContext == CUDA_ERROR_INVALID_CONTEXT);
static_assert(gpool::proto::cu::kPeerAccessUnsupported == CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
static_assert(gpool::proto::cu::kInvalidHandle == CUDA_ERROR_INVALID_HANDLE);
static_assert(gpool::proto::cu::kIllegalState == CUDA_ERROR_ILLEGAL_STATE);
static_assert(gpool::proto::cu::kNotFound == CUDA_ERROR_NOT_FOUND);
static_assert(gpool::proto::cu::kNotReady == CUDA_ERROR_NOT_READY);
static_assert(gpool::proto::cu::kNotPermitted == CUDA_ERROR_NOT_PERMITTED);
static_assert(gpool::proto::cu::kNotSupported == CUDA_ERROR_NOT_SUPPORTED);
static_assert(gpool::proto::cu::kStreamCaptureUnsupported == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
static_assert(gpool::proto::cu::kStreamCaptureInvalidated == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
static_assert(gpool::proto::cu::kInvalidResourceConfiguration == CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
