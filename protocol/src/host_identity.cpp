// The kernel's boot id (host_identity.h).
#include "gpool/protocol/host_identity.h"

#include <cctype>
#include <cstdio>

namespace gpool::proto {

std::string kernelBootId() {
  std::string boot;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char line[64] = {};
    if (std::fgets(line, sizeof line, f)) boot = line;
    std::fclose(f);
  }
  while (!boot.empty() && (boot.back() == '\n' || boot.back() == ' ')) boot.pop_back();
  return boot;
}

std::array<uint8_t, 16> kernelBootIdBytes() {
  std::array<uint8_t, 16> id{};
  std::string text = kernelBootId();
  auto nibble = [](char c) { return static_cast<uint8_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10); };
  size_t k = 0;
  for (size_t i = 0; i + 1 < text.size() && k < id.size(); ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(text[i])) || !std::isxdigit(static_cast<unsigned char>(text[i + 1]))) continue;
    id[k++] = static_cast<uint8_t>(nibble(text[i]) << 4 | nibble(text[i + 1]));
    ++i;
  }
  return id;
}

}  // namespace gpool::proto
