// Text from the network or a user (client names, user names, request paths) made safe to print in logs
// and terminal output: control characters and bytes outside printable ASCII are shown as \xNN (a
// backslash as \\), so nobody can forge log lines or send a terminal escape sequence.
#pragma once

#include <cctype>
#include <cstdio>
#include <string>
#include <string_view>

namespace gpool {

inline std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c >= 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// A label value as Prometheus's text format writes it between its double quotes: backslash, double quote
// and newline escaped (both daemons' /metrics).
inline std::string metricLabel(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

// Whether a name is 1-64 letters, digits, '.', '_' or '-': names (servers, queues, GPU types) that go into
// metrics, status and command lines unquoted.
inline bool isPlainName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (unsigned char c : name)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

// Whether text is printable ASCII only (what names such as users and groups must be).
inline bool isPrintable(std::string_view text) {
  for (unsigned char c : text)
    if (c < 0x20 || c >= 0x7f) return false;
  return true;
}

}  // namespace gpool
