// Durations and sizes as people write them, in policies, in lease requests and on the gpool command line,
// read and written the same way everywhere.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace gpool::allocator {

// A duration or size that is not one; what() names the text and the forms that are.
class UnitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "15s", "500ms", "2m", "1h" (at most 30 days) → milliseconds; "80GiB", "512MiB", "1e9", "4096" → bytes.
// Throw UnitError on junk.
std::chrono::milliseconds parseDuration(const std::string& text);
uint64_t parseSize(const std::string& text);
// The other way, for messages: 0.5 → "0.5"; 42949672960 → "40 GiB" (MiB below 1 GiB, bytes below 1 MiB).
std::string formatNumber(double v);
// A duration for messages, in whole seconds rounded up: 90 s → "1m30s", 2 h → "2h", 45 min → "45m".
std::string durationText(std::chrono::milliseconds d);
std::string formatSize(uint64_t bytes);

}  // namespace gpool::allocator
