// Requests signed with the allocator's key (gpool-server's registration and heartbeats, admin changes).
// Each carries its time and a nonce inside what is signed, so a captured request cannot be sent again:
//   X-Gpool-Time:      unix milliseconds when it was made
//   X-Gpool-Nonce:     32 hex digits, random, never used twice
//   X-Gpool-Signature: hex HMAC-SHA256(key, METHOD " " PATH "\n" TIME "\n" NONCE "\n" BODY)
// The allocator refuses one whose time is more than kSkewMs from its own clock, or whose nonce it saw.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace gpool::token {

inline constexpr int64_t kSkewMs = 60'000;  // how far a request's time may be from the allocator's clock

int64_t unixMillis();  // the wall clock, as requests carry it

// The three headers of a request made now.
std::vector<std::pair<std::string, std::string>> signRequest(const std::string& key, const std::string& method,
                                                             const std::string& path, const std::string& body);

// What a MUNGE credential made for a request carries (identity.h), so that it serves that request alone.
std::string mungePayload(const std::string& method, const std::string& path, const std::string& body);

// Remembers the nonces of the requests it accepted for as long as their times are acceptable, so each is
// accepted once. Thread-safe.
class ReplayGuard {
 public:
  // Whether the request is signed with `key`, recent and new; `why` names the fault otherwise.
  bool accept(const std::string& key, const std::string& method, const std::string& path, const std::string& body,
              const std::string& time, const std::string& nonce, const std::string& signature, int64_t now_ms,
              std::string& why);

 private:
  std::mutex mu_;
  std::unordered_set<std::string> seen_;
  std::deque<std::pair<int64_t, std::string>> order_;  // (request time, nonce), to forget them in time
};

}  // namespace gpool::token
