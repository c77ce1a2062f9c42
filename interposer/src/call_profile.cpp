// The per-request counts of GPOOL_PROFILE (call_profile.h), and the table written at exit.
#include "call_profile.h"

#include <errno.h>  // program_invocation_short_name
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpool/protocol/calls.h"

namespace gpool::client::profile {
namespace {

constexpr size_t kMessages = 0x400;  // every request number is below this (calls.h)

struct Counts {
  std::atomic<uint64_t> posted{0}, waited{0}, wait_ns{0}, sent{0}, received{0};
};

struct Profile {
  std::string where;  // "" for standard error
  pid_t pid = ::getpid();
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::array<Counts, kMessages> counts;
};

std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "k", "M", "G"};
  int i = 0;
  for (; v >= 1000 && i < 3; ++i) v /= 1000;
  char out[32];
  std::snprintf(out, sizeof out, i ? "%.1f %s%s" : "%.0f %s%s", v, prefixes[i], unit);
  return out;
}

std::string duration(double ns) {
  char out[32];
  if (ns < 1e3) std::snprintf(out, sizeof out, "%.0f ns", ns);
  else if (ns < 1e6) std::snprintf(out, sizeof out, "%.1f us", ns / 1e3);
  else if (ns < 1e9) std::snprintf(out, sizeof out, "%.1f ms", ns / 1e6);
  else std::snprintf(out, sizeof out, "%.2f s", ns / 1e9);
  return out;
}

// The program and its arguments (python3 workloads.py one resnet18), as far as 160 characters.
std::string programName() {
  std::string name = program_invocation_short_name;
  if (FILE* f = std::fopen("/proc/self/cmdline", "r")) {
    std::string args;
    for (int c; (c = std::fgetc(f)) != EOF && args.size() < 4096;) args += c ? static_cast<char>(c) : ' ';
    std::fclose(f);
    if (size_t first = args.find(' '); first != std::string::npos && first + 1 < args.size())
      name += " " + args.substr(first + 1, args.size() - first - 2);  // less argv[0] and the last NUL
  }
  return name.size() > 160 ? name.substr(0, 157) + "..." : name;
}

// The table: a summary line, then one row per request number used, the longest waits first.
std::string table(const Profile& p) {
  struct Row {
    uint16_t msg;
    uint64_t posted, waited, wait_ns, sent, received;
  };
  std::vector<Row> rows;
  Row all{};
  for (size_t m = 0; m < kMessages; ++m) {
    const Counts& c = p.counts[m];
    Row r{static_cast<uint16_t>(m), c.posted.load(), c.waited.load(), c.wait_ns.load(), c.sent.load(), c.received.load()};
    if (r.posted + r.waited == 0) continue;
    rows.push_back(r);
    all.posted += r.posted, all.waited += r.waited, all.wait_ns += r.wait_ns, all.sent += r.sent, all.received += r.received;
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.wait_ns != b.wait_ns ? a.wait_ns > b.wait_ns : a.posted + a.waited > b.posted + b.waited;
  });
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count();
  std::string out = "gpool profile of " + programName() + " (pid " + std::to_string(p.pid) + "), " +
                    duration(seconds * 1e9) + " from its first request: " + std::to_string(all.posted + all.waited) +
                    " requests, " + std::to_string(all.posted) + " sent without waiting, " + std::to_string(all.waited) +
                    " waited for (round trips), " + duration(static_cast<double>(all.wait_ns)) + " waiting in all; " +
                    human(static_cast<double>(all.sent), "B") + " sent, " + human(static_cast<double>(all.received), "B") +
                    " received\n";
  char line[200];
  std::snprintf(line, sizeof line, "  %-28s %10s %10s %12s %12s %12s %12s\n", "request", "sent", "waited", "waiting",
                "per wait", "bytes sent", "bytes recv");
  out += line;
  for (const Row& r : rows) {
    const char* name = proto::messageName(r.msg);
    std::string per = r.waited ? duration(static_cast<double>(r.wait_ns) / static_cast<double>(r.waited)) : "-";
    std::snprintf(line, sizeof line, "  %-28s %10llu %10llu %12s %12s %12s %12s\n", name ? name : "?",
                  static_cast<unsigned long long>(r.posted), static_cast<unsigned long long>(r.waited),
                  r.waited ? duration(static_cast<double>(r.wait_ns)).c_str() : "-", per.c_str(),
                  human(static_cast<double>(r.sent), "B").c_str(), human(static_cast<double>(r.received), "B").c_str());
    out += line;
  }
  return out;
}

Profile* profile();

// At exit, by the process that counted (a forked child inherits the counts, and says nothing).
void writeAtExit() {
  Profile* p = profile();
  if (!p || ::getpid() != p->pid) return;
  std::string text = table(*p);
  if (p->where.empty()) {
    std::fputs(text.c_str(), stderr);
    return;
  }
  int fd = ::open(p->where.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "gpool: GPOOL_PROFILE: cannot write %s (%s); the profile follows\n%s", p->where.c_str(),
                 std::strerror(errno), text.c_str());
    return;
  }
  [[maybe_unused]] ssize_t n = ::write(fd, text.data(), text.size());  // one write: processes share the file
  ::close(fd);
}

Profile* makeProfile() {
  const char* v = std::getenv("GPOOL_PROFILE");
  if (!v || !*v || !std::strcmp(v, "0")) return nullptr;
  auto* p = new Profile;  // lives to the end of the process: the exit handler reads it
  if (std::strcmp(v, "1") != 0 && std::strcmp(v, "stderr") != 0) {
    p->where = v;
    if (size_t at = p->where.find("%p"); at != std::string::npos) p->where.replace(at, 2, std::to_string(p->pid));
  }
  std::atexit(writeAtExit);
  return p;
}

Profile* profile() {
  static Profile* p = makeProfile();
  return p;
}

Counts* countsOf(uint16_t msg) {
  Profile* p = profile();
  return p && msg < kMessages ? &p->counts[msg] : nullptr;
}

}  // namespace

bool enabled() { return profile() != nullptr; }

void posted(uint16_t msg, size_t bytes) {
  if (Counts* c = countsOf(msg)) {
    c->posted.fetch_add(1, std::memory_order_relaxed);
    c->sent.fetch_add(bytes, std::memory_order_relaxed);
  }
}

void waited(uint16_t msg, size_t sent, size_t received, std::chrono::nanoseconds wait) {
  if (Counts* c = countsOf(msg)) {
    c->waited.fetch_add(1, std::memory_order_relaxed);
    c->wait_ns.fetch_add(static_cast<uint64_t>(wait.count()), std::memory_order_relaxed);
    c->sent.fetch_add(sent, std::memory_order_relaxed);
    c->received.fetch_add(received, std::memory_order_relaxed);
  }
}

}  // namespace gpool::client::profile
