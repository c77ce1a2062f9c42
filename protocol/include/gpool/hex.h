// Bytes as lower-case hex digits, and back: names of records and cached images, lease tokens' fields, the
// seals gpool-server gives its workers. Header-only: libraries that share nothing else use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpool {

inline std::string hexOf(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) s += digits[p[i] >> 4], s += digits[p[i] & 15];
  return s;
}

// Fills `out` with the `n` bytes `text` spells: false unless it is exactly 2n lower-case hex digits.
inline bool unhexTo(std::string_view text, uint8_t* out, size_t n) {
  if (text.size() != 2 * n) return false;
  auto value = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  for (size_t i = 0; i < n; ++i) {
    int hi = value(text[2 * i]), lo = value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace gpool
