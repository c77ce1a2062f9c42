// The `cuda` backend: executes forwarded calls on the real driver, loaded with dlopen, inside the
// device's primary context. Handles and ranges are validated against what this worker handed out.
#pragma once

#include <memory>
#include <string>

#include "backend.h"

namespace gpool::worker {

// The driver library the cuda backend loads: PATH, or libcuda.so.1 as the loader finds it when empty.
// Before the first backend is made or the driver probed.
void useCudaDriver(const std::string& path);

// True when a real driver loads and reports at least one device (used by --backend auto).
bool cudaDriverUsable(std::string* why);

std::unique_ptr<Backend> makeCudaBackend();

}  // namespace gpool::worker
