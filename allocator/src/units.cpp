// Durations and sizes as people write them (see gpool/allocator/units.h).
#include "gpool/allocator/units.h"

#include <cctype>
#include <map>
#include <sstream>

namespace gpool::allocator {

std::chrono::milliseconds parseDuration(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0 || i > 12) throw UnitError("'" + s + "' is not a duration (use 500ms, 15s, 2m, 1h)");
  double v = 0;
  try {
    v = std::stod(s.substr(0, i));
  } catch (const std::exception&) {  // "." and the like (found by fuzz_policy)
    throw UnitError("'" + s + "' is not a duration (use 500ms, 15s, 2m, 1h)");
  }
  std::string unit = s.substr(i);
  double ms = unit == "ms" ? v : unit == "s" || unit.empty() ? v * 1e3 : unit == "m" ? v * 60e3 : unit == "h" ? v * 3600e3 : -1;
  if (ms < 0) throw UnitError("'" + s + "' has an unknown unit (use ms, s, m, h)");
  if (ms > 30.0 * 24 * 3600e3) throw UnitError("'" + s + "' is longer than 30 days");
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

std::string durationText(std::chrono::milliseconds d) {
  int64_t s = (d.count() + 999) / 1000, h = s / 3600, m = s % 3600 / 60;
  s %= 60;
  std::string out;
  if (h) out += std::to_string(h) + "h";
  if (m) out += std::to_string(m) + "m";
  if (s || out.empty()) out += std::to_string(s) + "s";
  return out;
}

uint64_t parseSize(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == 'e' || s[i] == 'E'))
    ++i;
  if (i == 0 || i > 20) throw UnitError("'" + s + "' is not a size (use 512MiB, 80GiB, 1.5TB or bytes)");
  double v = 0;
  try {
    v = std::stod(s.substr(0, i));
  } catch (...) {
    throw UnitError("'" + s + "' is not a size (use 512MiB, 80GiB, 1.5TB or bytes)");
  }
  static const std::map<std::string, double> units{{"", 1},         {"B", 1},        {"KB", 1e3},  {"MB", 1e6},
                                                   {"GB", 1e9},     {"TB", 1e12},    {"KiB", 1024.0}, {"MiB", 1048576.0},
                                                   {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"K", 1024.0},
                                                   {"M", 1048576.0}, {"G", 1073741824.0}, {"T", 1099511627776.0}};
  auto u = units.find(s.substr(i));
  if (u == units.end()) throw UnitError("'" + s + "' has an unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  double bytes = v * u->second;
  if (!(bytes >= 0) || bytes > 1.8e19) throw UnitError("'" + s + "' is out of range");
  return static_cast<uint64_t>(bytes);
}

std::string formatNumber(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

std::string formatSize(uint64_t b) {
  std::ostringstream o;
  o.precision(3);
  if (b >= (1ull << 30)) o << b / 1073741824.0 << " GiB";
  else if (b >= (1ull << 20)) o << b / 1048576.0 << " MiB";
  else o << b << " bytes";
  return o.str();
}

}  // namespace gpool::allocator
