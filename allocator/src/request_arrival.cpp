#include "request_arrival.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <string>

namespace gpool::allocator {
namespace {

// The length of the head, up to and with the empty line that ends it (httplib ends a line at "\n",
// with or without "\r"); 0 while it has not come.
size_t headLength(std::string_view b) {
  for (size_t at = b.find('\n'); at != std::string_view::npos; at = b.find('\n', at + 1)) {
    if (b.substr(at + 1, 1) == "\n") return at + 2;
    if (b.substr(at + 1, 2) == "\r\n") return at + 3;
  }
  return 0;
}

bool named(std::string_view line, std::string_view name) {
  return line.size() > name.size() && line[name.size()] == ':' &&
         std::equal(name.begin(), name.end(), line.begin(), [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
}

// `line`'s value after "name:", without the blanks around it.
std::string_view valueOf(std::string_view line, size_t name_length) {
  std::string_view v = line.substr(name_length + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.remove_suffix(1);
  return v;
}

}  // namespace

Arrival requestArrival(std::string_view received) {
  size_t head = headLength(received.substr(0, kMaxRequestHead));
  if (head == 0) return received.size() >= kMaxRequestHead ? Arrival::kUnreadable : Arrival::kPartial;
  std::optional<size_t> body;
  bool expect = false;
  std::string_view rest = received.substr(0, head);
  rest.remove_prefix(rest.find('\n') + 1);  // past the request line
  for (size_t end; (end = rest.find('\n')) != std::string_view::npos; rest.remove_prefix(end + 1)) {
    std::string_view line = rest.substr(0, end);
    if (named(line, "transfer-encoding")) return Arrival::kWhole;
    expect = expect || named(line, "expect");
    if (!named(line, "content-length")) continue;
    std::string_view v = valueOf(line, 14);
    size_t n = 0;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec == std::errc::result_out_of_range) return Arrival::kBodyTooLarge;
    if (ec != std::errc() || ptr != v.data() + v.size() || body) return Arrival::kUnreadable;
    body = n;
  }
  if (body.value_or(0) > kMaxRequestBody) return Arrival::kBodyTooLarge;
  if (received.size() - head >= body.value_or(0)) return Arrival::kWhole;
  return expect ? Arrival::kContinue : Arrival::kPartial;
}

}  // namespace gpool::allocator
