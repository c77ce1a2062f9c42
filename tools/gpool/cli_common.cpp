#include "cli_common.h"

#include "gpool/allocator/units.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

namespace gpool::cli {

void die(int code, const std::string& msg) {
  std::fprintf(stderr, "gpool: %s\n", msg.c_str());
  std::exit(code);
}

std::string env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string fmtDuration(double s) {
  std::ostringstream o;
  if (s < 120) o << static_cast<int>(s) << "s";
  else if (s < 3600) o << static_cast<int>(s / 60) << "m" << static_cast<int>(s) % 60 << "s";
  else o << static_cast<int64_t>(s / 3600) << "h" << static_cast<int64_t>(s) % 3600 / 60 << "m";
  return o.str();
}

double durationSeconds(const std::string& option, const std::string& value) {
  try {
    return static_cast<double>(gpool::allocator::parseDuration(value).count()) / 1000;
  } catch (const std::exception& e) {
    die(kExitUsage, option + ": " + e.what());
  }
}

std::string readFile(const std::string& path) {
  if (path == "-") return std::string((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::ifstream f(path);
  if (!f) die(kExitUsage, "cannot read " + path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string errorText(const std::string& answer) {
  auto j = nlohmann::json::parse(answer, nullptr, false);
  return j.is_object() && j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>() : answer;
}

nlohmann::json must(int status, const std::string& text) {
  if (status <= 0) die(kExitAllocator, text);  // unreachable, or no proof of who asks
  if (status >= 400) die(kExitAllocator, errorText(text));
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) die(kExitAllocator, "unexpected answer from the allocator: " + text.substr(0, 200));
  return j;
}

nlohmann::json must(AllocatorClient& a, const std::string& method, const std::string& path, Proof proof, const std::string& body) {
  auto [status, text] = a.call(method, path, proof, body);
  return must(status, text);
}

}  // namespace gpool::cli
