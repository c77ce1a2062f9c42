// Client-side log sink (stderr, and CUDA's error log) and the "not supported" answer every unimplemented
// entry point gives.
#include "log.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <vector>

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


// CUDA's error log: the warnings and errors, the newest kKeptBytes of them, numbered from 0.
namespace driver_log {
namespace {
struct Subscriber {
  Callback fn;
  void* data;
};
std::mutex g_mu;
std::deque<std::string> g_kept;
size_t g_bytes = 0;
uint32_t g_next = 0;  // the number the next message gets
std::list<Subscriber> g_subscribers;  // stable addresses: a handle is one
}  // namespace

void add(Level level, const std::string& line) {
  std::string text = "gpool: " + line;
  std::vector<Subscriber> call;
  {
    std::lock_guard lock(g_mu);
    g_kept.push_back(text);
    g_bytes += text.size() + 1;
    ++g_next;
    while (g_bytes > kKeptBytes && g_kept.size() > 1) {
      g_bytes -= g_kept.front().size() + 1;
      g_kept.pop_front();
    }
    call.assign(g_subscribers.begin(), g_subscribers.end());
  }
  // Called without the lock: a callback may read the log.
  for (const Subscriber& s : call) s.fn(s.data, level == Level::kError ? 0 : 1, text.data(), text.size());
}

uint32_t current() {
  std::lock_guard lock(g_mu);
  return g_next;
}

Dump dump(uint32_t* from, size_t limit) {
  std::lock_guard lock(g_mu);
  const uint32_t first = g_next - static_cast<uint32_t>(g_kept.size());
  const uint32_t start = from ? std::min(*from, g_next) : first;
  Dump d;
  size_t taken = 0;
  for (size_t i = g_kept.size(); i-- > 0 && first + i >= start;) {  // newest first, until the start or the limit
    if (d.text.size() + g_kept[i].size() + 1 > limit) break;
    d.text.insert(0, g_kept[i] + "\n");
    ++taken;
  }
  const size_t wanted = g_next - start;
  if (wanted > 0 && taken == 0) return Dump{"", true};
  if (taken < wanted) {
    const std::string note = "[gpool: " + std::to_string(wanted - taken) + " earlier message(s) not shown: overwritten, or past the buffer]\n";
    while (d.text.size() + note.size() > limit && d.text.find('\n') + 1 < d.text.size()) d.text.erase(0, d.text.find('\n') + 1);
    if (d.text.size() + note.size() <= limit) d.text.insert(0, note);
  }
  if (from) *from = g_next;
  return d;
}

void* subscribe(Callback fn, void* data) {
  std::lock_guard lock(g_mu);
  return &g_subscribers.emplace_back(Subscriber{fn, data});
}

bool unsubscribe(void* handle) {
  std::lock_guard lock(g_mu);
  const size_t before = g_subscribers.size();
  g_subscribers.remove_if([handle](const Subscriber& s) { return &s == handle; });
  return g_subscribers.size() != before;
}
}  // namespace driver_log

void logLine(Level level, const std::string& line) {
  static const char* names[] = {"error", "warning", "info", "debug"};
  if (logEnabled(level)) std::fprintf(stderr, "gpool: %s: %s\n", names[static_cast<int>(level)], line.c_str());
  if (level <= Level::kWarn) driver_log::add(level, line);
}

// Said once on stderr, and at every call in CUDA's error log (read after the call that failed).
int unsupported_call(const char* name, const char* why, int* once) {
  char line[1024];
  std::snprintf(line, sizeof line, "%s is not supported by gpool: %s; returning CUDA_ERROR_NOT_SUPPORTED", name, why);
  if (!__atomic_exchange_n(once, 1, __ATOMIC_RELAXED)) logLine(Level::kWarn, line);
  else driver_log::add(Level::kWarn, line);
  return 801;  // CUDA_ERROR_NOT_SUPPORTED
}

int unexpectedException(const char* function) {
  GPOOL_LOG(Level::kError, "internal error in %s; returning CUDA_ERROR_UNKNOWN", function);
  return 999;  // CUDA_ERROR_UNKNOWN
}

}  // namespace gpool::client
