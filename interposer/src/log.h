// Logging for the client library: it lives inside the user's process, so it writes short lines to
// stderr prefixed "gpool:", at GPOOL_LOG_LEVEL (error, warn, info, debug; default warn).
#pragma once

#include <cstdio>
#include <string>

namespace gpool::client {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

bool logEnabled(Level level);
void logLine(Level level, const std::string& line);

#define GPOOL_LOG(level, ...)                                                           \
  do {                                                                                  \
    if (::gpool::client::logEnabled(level)) {                                           \
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
