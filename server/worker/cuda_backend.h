// The `cuda` backend: executes forwarded calls on the real driver, loaded with dlopen, inside the
// device's primary context. Handles and ranges are validated against what this worker handed out.
#pragma once

#include <memory>
#include <string>

#include "backend.h"

namespace gpool::worker {

// True when a real driver loads and reports at least one device (used by --backend auto).
bool cudaDriverUsable(std::string* why);

std::unique_ptr<Backend> makeCudaBackend();

}  // namespace gpool::worker
