// The CUDA driver's settings that live in the environment (CUDA_DEVICE_MAX_CONNECTIONS, which Megatron-LM
// requires to be 1; CUDA_LAUNCH_BLOCKING, which PyTorch's errors advise for debugging; ...). The program's
// environment is the client's, and the driver that reads them is the worker's: the client carries the
// ones it has in its Hello, and the server starts the worker with them. Only these, each with the values
// the driver accepts, may be carried: a setting that names a path (CUDA_CACHE_PATH) or anything else
// would let a client change the server's files or processes. Header-only: the client and server share it.
#pragma once

#include <array>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace gpool::proto {

struct DriverSetting {
  std::string_view name;
  std::array<std::string_view, 2> choices;  // its values; both empty: a whole number from 1 to 32
};

inline constexpr std::array<DriverSetting, 5> kDriverSettings = {{
    {"CUDA_DEVICE_MAX_CONNECTIONS", {"", ""}},
    {"CUDA_LAUNCH_BLOCKING", {"0", "1"}},
    {"CUDA_MODULE_LOADING", {"LAZY", "EAGER"}},
    {"CUDA_FORCE_PTX_JIT", {"0", "1"}},
    {"CUDA_DISABLE_PTX_JIT", {"0", "1"}},
}};

// Whether `entry` ("NAME=VALUE") is one of the settings above with a value it takes.
inline bool validDriverSetting(std::string_view entry) {
  const size_t eq = entry.find('=');
  if (eq == std::string_view::npos) return false;
  const std::string_view name = entry.substr(0, eq), value = entry.substr(eq + 1);
  for (const DriverSetting& s : kDriverSettings) {
    if (s.name != name) continue;
    if (!s.choices[0].empty()) return value == s.choices[0] || value == s.choices[1];
    if (value.empty() || value.size() > 2 || value.find_first_not_of("0123456789") != std::string_view::npos) return false;
    const int n = std::stoi(std::string(value));
    return n >= 1 && n <= 32;
  }
  return false;
}

// The settings this process's environment holds, as NAME=VALUE, those with values the driver takes.
inline std::vector<std::string> driverSettingsFromEnvironment() {
  std::vector<std::string> out;
  for (const DriverSetting& s : kDriverSettings) {
    const char* v = std::getenv(std::string(s.name).c_str());
    if (!v) continue;
    std::string entry = std::string(s.name) + "=" + v;
    if (validDriverSetting(entry)) out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace gpool::proto
