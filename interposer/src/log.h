// Logging for the client library: it lives inside the user's process, so it writes short lines to
// stderr prefixed "gpool:", at GPOOL_LOG_LEVEL (error, warn, info, debug; default warn), and keeps its
// warnings and errors in CUDA's error log (cuLogs*).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gpool::client {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

bool logEnabled(Level level);
// Writes a line to stderr at its level; warnings and errors are also kept in CUDA's error log, whatever the
// level (driver_log, below).
void logLine(Level level, const std::string& line);

// CUDA's error log (cuLogs*, api_logs.cpp): gpool's warnings and errors, the newest kKeptBytes of them (as
// NVIDIA's driver keeps its own), each numbered in turn; subscribers are called with each new one.
namespace driver_log {
inline constexpr size_t kKeptBytes = 25600;
void add(Level level, const std::string& line);  // kept as "gpool: LINE", as stderr shows it
uint32_t current();  // the number the next message will get
struct Dump {
  std::string text;        // one message per line
  bool none_fit = false;   // there were messages to dump, and not one fitted
};
// The messages numbered `*from` on (all kept ones: from null), the newest that fit `limit` bytes, after a
// line that says how many are missing where some are; `*from` moves past them, unless none fitted.
Dump dump(uint32_t* from, size_t limit);
using Callback = void (*)(void* data, int level /*CUlogLevel*/, char* message, size_t length);
void* subscribe(Callback fn, void* data);
bool unsubscribe(void* handle);
}  // namespace driver_log

#define GPOOL_LOG(level, ...)                                                           \
  do {                                                                                  \
    if (::gpool::client::logEnabled(level) || (level) <= ::gpool::client::Level::kWarn) { \
      char gpool_log_buf_[1024];                                                        \
      std::snprintf(gpool_log_buf_, sizeof gpool_log_buf_, __VA_ARGS__);                \
      ::gpool::client::logLine(level, gpool_log_buf_);                                  \
    }                                                                                   \
  } while (0)

// Logs `name` once (per `once` flag) as unsupported, and why (interposer/refusals.py), and returns
// CUDA_ERROR_NOT_SUPPORTED.
int unsupported_call(const char* name, const char* why, int* once);
// For exported entry points: an exception must never cross the C ABI.
int unexpectedException(const char* function);

}  // namespace gpool::client
