// What a worker inherits of gpool-server's environment: what gpool, NVIDIA's driver, UCX and the sanitizers
// read, and the basics (PATH, HOME, TMPDIR, the locale and time zone). Anything else the server was given
// may be a secret of the host's (a cloud credential), which a worker taken over by its client would read in
// its own environment. The client's driver settings (checked at its Hello) take the place of the server's.
// Not CUDA_CACHE_PATH: a worker is given its lease's user's JIT cache (jit_caches.h), never one for all.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gpool::server {

// Whether a worker inherits the server's variable `name`.
bool inheritedByWorkers(std::string_view name);

// A worker's environment: what it inherits of `server` (NAME=VALUE entries, null-terminated as environ is),
// then `driver`, the client's driver settings, in place of the server's of the same names.
std::vector<std::string> workerEnvironment(char** server, const std::vector<std::string>& driver);

}  // namespace gpool::server
