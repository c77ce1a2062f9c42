// What every part of the gpool command shares: its own exit statuses, dying with a message, reading the
// environment, and the allocator's answers as JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "allocator_client.h"

namespace gpool::cli {

// Exit statuses of gpool itself (the command's own status is passed through otherwise).
constexpr int kExitUsage = 2, kExitRefused = 3, kExitWaitRanOut = 4, kExitAllocator = 5;
// The command was preempted (its GPUs went to a queue's guarantee) and --requeue was not given:
// EX_TEMPFAIL of sysexits.h, "try again later".
constexpr int kExitPreempted = 75;
constexpr int kExitTimeLimit = 124;  // the lease reached its time limit (as timeout(1) exits)

[[noreturn]] void die(int code, const std::string& msg);
std::string env(const char* name, const std::string& fallback = "");
std::string fmtDuration(double seconds);  // "42s", "3m7s", "2h5m"
// A duration option's value ("30s", "2h") in seconds; dies naming `option` when it is not one.
double durationSeconds(const std::string& option, const std::string& value);
// A file's whole text, or standard input's for "-"; dies with a usage message when it cannot be read.
std::string readFile(const std::string& path);
// The answer as JSON; dies with the allocator's message on an error.
nlohmann::json must(AllocatorClient& a, const std::string& method, const std::string& path, Proof proof,
                    const std::string& body = "");
nlohmann::json must(int status, const std::string& answer);  // an answer already had
// The message of an error answer ({"error": "..."}), or the answer itself when it is not one.
std::string errorText(const std::string& answer);

}  // namespace gpool::cli
