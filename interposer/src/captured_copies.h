// Copies between this process's memory and the device inside a stream capture (NVIDIA's simpleCudaGraphs,
// jacobiCudaGraphs): the worker captures them through a staging buffer of its own, and at every replay asks
// this process, on the host-function channel, for the rows to copy to the device, or gives it the rows
// copied from the device. Only rows of a copy this process issued are ever read or written.
#pragma once

#include <cstdint>

#include "state.h"  // CUresult, with cuda.h as the library includes it

namespace gpool::client {

// While a capture is active in this process, offers `copy` between host rows (`host`, `host_pitch`) and
// device rows on `stream` to `conn`'s worker; `captured` says whether the stream captured it, in which
// case there is nothing more to do. Otherwise (and whenever no capture is active) the caller copies as usual.
CUresult captureHostCopy(Connection* conn, const proto::HostRowsCopy& copy, uint64_t host, uint64_t host_pitch, uint64_t stream,
                         bool& captured);

// Opens `conn`'s host-function channel, once (api_host_func.cpp).
CUresult openHostChannel(Connection* conn);

}  // namespace gpool::client
