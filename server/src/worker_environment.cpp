#include "worker_environment.h"

#include <algorithm>

namespace gpool::server {

bool inheritedByWorkers(std::string_view name) {
  if (name == "CUDA_CACHE_PATH") return false;  // (a worker is given its lease's user's: jit_caches.h)
  for (std::string_view exact : {"PATH", "HOME", "TMPDIR", "LANG", "TZ", "LD_LIBRARY_PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS",
                                 "LSAN_OPTIONS"})
    if (name == exact) return true;
  // (__ : the driver's own switches, such as __NV_PRIME_RENDER_OFFLOAD and __CUDA_...)
  for (std::string_view prefix : {"GPOOL_", "CUDA_", "NVIDIA_", "NV_", "__", "UCX_", "LC_"})
    if (name.substr(0, prefix.size()) == prefix) return true;
  return false;
}

std::vector<std::string> workerEnvironment(char** server, const std::vector<std::string>& driver) {
  auto nameOf = [](std::string_view entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> env;
  for (char** e = server; e && *e; ++e) {
    std::string_view name = nameOf(*e);
    if (!inheritedByWorkers(name)) continue;
    if (std::none_of(driver.begin(), driver.end(), [&](const std::string& d) { return nameOf(d) == name; }))
      env.emplace_back(*e);
  }
  env.insert(env.end(), driver.begin(), driver.end());
  return env;
}

}  // namespace gpool::server
