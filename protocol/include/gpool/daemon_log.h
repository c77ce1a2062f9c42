// What gpool's daemons (gpool-allocator, gpool-server, gpool-worker) share of logging: the --log-level
// option, and spdlog writing "DATE TIME LEVEL NAME[PID] MESSAGE" lines to standard error (gpool-server
// reads its workers' lines in this form: server/src/worker_log.h).
#pragma once

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <string>

namespace gpool::daemon {

inline CLI::Option* addLogLevelOption(CLI::App& app, std::string& level) {
  return app.add_option("--log-level", level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
}

// Makes the process's default logger, named `name`, at `level` (one --log-level takes).
inline void startLog(const std::string& name, const std::string& level) {
  spdlog::set_default_logger(spdlog::stderr_color_mt(name));
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ " + name + "[%P] %v");
}

}  // namespace gpool::daemon
