// Client-side log sink and the "not supported" answer every unimplemented entry point gives.
#include "log.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace gpool::client {
namespace {

Level configuredLevel() {
  const char* v = std::getenv("GPOOL_LOG_LEVEL");
  if (!v) return Level::kWarn;
  if (!std::strcmp(v, "error")) return Level::kError;
  if (!std::strcmp(v, "info")) return Level::kInfo;
  if (!std::strcmp(v, "debug") || !std::strcmp(v, "trace")) return Level::kDebug;
  return Level::kWarn;
}

}  // namespace

bool logEnabled(Level level) {
  static const Level configured = configuredLevel();
  return level <= configured;
}

void logLine(Level level, const std::string& line) {
  static const char* names[] = {"error", "warning", "info", "debug"};
  std::fprintf(stderr, "gpool: %s: %s\n", names[static_cast<int>(level)], line.c_str());
}

int unsupported_call(const char* name, const char* why, int* once) {
  if (!__atomic_exchange_n(once, 1, __ATOMIC_RELAXED))
    GPOOL_LOG(Level::kWarn, "%s is not supported by gpool: %s; returning CUDA_ERROR_NOT_SUPPORTED", name, why);
  return 801;  // CUDA_ERROR_NOT_SUPPORTED
}

int unexpectedException(const char* function) {
  GPOOL_LOG(Level::kError, "internal error in %s; returning CUDA_ERROR_UNKNOWN", function);
  return 999;  // CUDA_ERROR_UNKNOWN
}

}  // namespace gpool::client
