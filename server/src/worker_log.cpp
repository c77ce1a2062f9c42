#include "worker_log.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "gpool/printable.h"

namespace gpool::server {

namespace {

// The level a worker's log line names ("warning" for spdlog's warn), if it names one.
std::optional<spdlog::level::level_enum> levelNamed(std::string_view word) {
  if (word == "warning") return spdlog::level::warn;
  auto level = spdlog::level::from_str(std::string(word));  // (off: a word it does not know; a worker never logs "off")
  if (level == spdlog::level::off) return std::nullopt;
  return level;
}

// Whether `text` starts with the worker's time stamp, "YYYY-MM-DD HH:MM:SS.mmm ".
bool stamped(std::string_view text) {
  static constexpr std::string_view kShape = "dddd-dd-dd dd:dd:dd.ddd ";
  if (text.size() < kShape.size()) return false;
  for (size_t i = 0; i < kShape.size(); ++i)
    if (kShape[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(text[i])) : text[i] != kShape[i]) return false;
  return true;
}

}  // namespace

WorkerLog::Line WorkerLog::read(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (stamped(line)) {
    std::string_view rest = line.substr(24);
    size_t space = rest.find(' ');
    auto level = space == std::string_view::npos ? std::nullopt : levelNamed(rest.substr(0, space));
    if (level) {
      rest.remove_prefix(space + 1);
      if (rest.starts_with("gpool-worker[")) {
        size_t end = rest.find("] ");
        if (end != std::string_view::npos) rest.remove_prefix(end + 2);
      }
      return {*level, printable(rest)};
    }
  }
  return {spdlog::level::warn, printable(line)};
}

void WorkerLog::relay(asio::io_context& io, int read_fd, pid_t pid, const std::string& lease) {
  std::make_shared<WorkerLog>(io, read_fd, pid, lease)->readMore();
}

WorkerLog::WorkerLog(asio::io_context& io, int read_fd, pid_t pid, const std::string& lease)
    : pipe_(io, read_fd), wait_(io), who_("worker " + std::to_string(pid) + (lease.empty() ? "" : " (lease " + lease + ")")) {}

void WorkerLog::readMore() {
  pipe_.async_read_some(asio::buffer(buffer_), [self = shared_from_this()](const asio::error_code& ec, size_t n) {
    self->take({self->buffer_, n});
    if (ec) {  // every writer closed it (the worker ended, and all it left running): the rest is a line
      if (!self->line_.empty() || self->cut_ > 0) self->logLine();
      return;
    }
    self->pace(n);
  });
}

void WorkerLog::take(std::string_view bytes) {
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    std::string_view part = bytes.substr(0, newline);
    size_t room = kLongestLine - line_.size();
    line_.append(part.substr(0, room));
    cut_ += part.size() - std::min(room, part.size());
    if (newline == std::string_view::npos) return;
    logLine();
    bytes.remove_prefix(newline + 1);
  }
}

void WorkerLog::logLine() {
  Line l = read(line_);
  if (cut_ > 0) l.text += " [" + std::to_string(cut_) + " more bytes of this line not logged]";
  spdlog::log(l.level, "{}: {}", who_, l.text);
  line_.clear();
  cut_ = 0;
}

// What the worker wrote is paid from what it saved, which grows by kBytesPerSecond up to kSavedBytes. Once
// it owes, the pipe is read again only when the pace has paid that off, and the worker's writes wait.
void WorkerLog::pace(size_t bytes) {
  auto now = std::chrono::steady_clock::now();
  saved_ = std::min(kSavedBytes, saved_ + kBytesPerSecond * std::chrono::duration<double>(now - saved_at_).count());
  saved_at_ = now;
  saved_ -= static_cast<double>(bytes);
  if (saved_ >= 0) return readMore();
  if (!said_slow_) {
    said_slow_ = true;
    spdlog::warn("{} writes more than {} KiB a second to its log: what it writes waits for the server to read it", who_,
                 static_cast<int>(kBytesPerSecond / 1024));
  }
  wait_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(-saved_ / kBytesPerSecond)));
  wait_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (!ec) self->readMore();
  });
}

}  // namespace gpool::server
