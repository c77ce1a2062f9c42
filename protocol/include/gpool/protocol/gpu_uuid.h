// A device UUID (16 bytes, as cuDeviceGetUuid gives it) in the text form NVML and nvidia-smi use:
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". Header-only: the NVML shim uses it without the protocol library.
#pragma once

#include <cstdint>
#include <string>

namespace gpool::proto {

inline std::string gpuUuidText(const uint8_t* b) {
  static const char* digits = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += digits[b[i] >> 4];
    s += digits[b[i] & 15];
  }
  return s;
}

}  // namespace gpool::proto
