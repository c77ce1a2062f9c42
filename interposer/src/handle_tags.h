// Handles of a lease's several workers, kept apart in one process. Each worker hands out its driver's
// real handles (host pointers in the worker's own process), so two workers may hand out the same value.
// In a lease of several connections, connection k marks every handle it hands out with k in the top
// byte (never set in a user-space pointer) and strips the mark from every handle it sends; a handle marked
// for another connection is another device's, refused as the driver refuses it (or, for a
// context-independent library or kernel, mapped to this device's copy, cross_device.h). Connection 0's
// handles carry mark 0: they are the worker's values unchanged, and a one-device lease marks nothing.
#pragma once

#include <cstdint>
#include <tuple>
#include <type_traits>

#include "gpool/protocol/fields.h"

namespace gpool::client::tags {

inline constexpr int kShift = 56;
inline constexpr uint64_t kValueMask = (uint64_t{1} << kShift) - 1;
// Values below this are no worker's own: null, and the legacy and per-thread default streams, which every
// device has. They pass unmarked to whichever connection a call goes to.
inline constexpr uint64_t kFirstOwned = 0x10000;

inline bool shared(uint64_t v) { return v < kFirstOwned; }
// The connection a handle came from, or -1 for a shared value.
inline int owner(uint64_t v) { return shared(v) ? -1 : static_cast<int>(v >> kShift); }
inline uint64_t mark(uint64_t v, int connection) {
  return shared(v) ? v : v | (static_cast<uint64_t>(connection) << kShift);
}
inline uint64_t strip(uint64_t v) { return v & kValueMask; }

// What a handle is, where a foreign one might still be usable here.
enum class HandleClass {
  kContextBound,  // streams, events, graphs, modules, CUfunctions...: another device's is refused
  kLaunchable,    // a CUkernel or CUfunction: a library's kernel exists on every device
  kLibrary,       // a CUlibrary: context-independent, loaded on every device that uses it
};

// Texture and surface objects are values kernels take as arguments, so they travel unmarked: a kernel on
// any device must receive its worker's own value. The client library keeps which connection made each
// (api_texture.cpp).
template <typename U>
concept KernelArgumentHandle = requires { U::kind; } &&
                               (U::kind == gpool::proto::HandleKind::kTexObject || U::kind == gpool::proto::HandleKind::kSurfObject);

// Calls f(uint64_t& handle, HandleClass) for every handle a request or reply field holds.
template <typename T, typename F>
void forEachHandle(T& x, F& f) {
  using U = std::remove_cvref_t<T>;
  namespace p = gpool::proto;
  if constexpr (std::is_base_of_v<p::Launchable, U>) {
    f(x.v, HandleClass::kLaunchable);
  } else if constexpr (std::is_base_of_v<p::ModuleRef, U>) {
    f(x.handle, x.kind == 1 ? HandleClass::kLibrary : HandleClass::kContextBound);
  } else if constexpr (std::is_base_of_v<p::LaunchableList, U>) {
    for (auto& v : x.v) f(v, HandleClass::kLaunchable);
  } else if constexpr (std::is_base_of_v<p::GraphNodes, U> || std::is_base_of_v<p::BodyGraphs, U>) {
    for (auto& v : x.v) f(v, HandleClass::kContextBound);
  } else if constexpr (std::is_base_of_v<p::ChildGraph, U>) {
    f(x.v, HandleClass::kContextBound);
  } else if constexpr (KernelArgumentHandle<U>) {
    // unmarked (above)
  } else if constexpr (requires { U::kind; requires std::is_same_v<decltype(U::kind), const p::HandleKind>; }) {
    f(x.v, U::kind == p::HandleKind::kKernel ? HandleClass::kLaunchable : HandleClass::kContextBound);
  } else if constexpr (p::WireStruct<U>) {
    std::apply([&](auto&... m) { (forEachHandle(m, f), ...); }, x.wireFields());
  }
}

template <typename Tuple, typename F>
void forEachHandleIn(Tuple& fields, F& f) {
  std::apply([&](auto&... v) { (forEachHandle(v, f), ...); }, fields);
}

}  // namespace gpool::client::tags
