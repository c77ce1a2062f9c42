// Bytes as hex text and back, for handles a test passes between its processes on their command lines.
#pragma once

#include <cstdio>
#include <string>

inline std::string hex(const void* p, size_t n) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", static_cast<const unsigned char*>(p)[i]);
    s += b;
  }
  return s;
}

inline void unhex(const std::string& s, void* out, size_t n) {
  for (size_t i = 0; i < n; ++i)
    static_cast<unsigned char*>(out)[i] = static_cast<unsigned char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
}
