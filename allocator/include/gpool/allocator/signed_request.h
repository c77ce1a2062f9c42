// Signed requests to the allocator: admin changes (HMAC with the allocator's admin key) and gpool-server's
// registration, heartbeats and reports (Ed25519 with the server's own key, which an admin enrolled).
// Each carries its time and a nonce inside what is signed, so a captured request cannot be sent again:
//   X-Gpool-Time:      unix milliseconds when it was made
//   X-Gpool-Nonce:     32 hex digits, random, never used twice
//   X-Gpool-Signature: hex signature of METHOD " " PATH "\n" TIME "\n" NONCE "\n" BODY:
//                      HMAC-SHA256 under the admin key, or Ed25519 under the server's key
//   X-Gpool-Server:    the server's name (server requests only: whose enrolled key verifies it)
// The allocator refuses one whose time is more than kSkewMs from its own clock, or whose nonce it saw.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpool/allocator/ed25519_key.h"

namespace gpool::token {

inline constexpr int64_t kSkewMs = 60'000;  // how far a request's time may be from the allocator's clock

int64_t unixMillis();  // the wall clock, as requests carry it

using Headers = std::vector<std::pair<std::string, std::string>>;
// The headers of an admin request made now, signed with the admin key.
Headers signRequest(const std::string& admin_key, const std::string& method, const std::string& path, const std::string& body);
// The headers of server `server`'s request made now, signed with its key.
Headers signRequest(const Ed25519Key& server_key, const std::string& server, const std::string& method, const std::string& path,
                    const std::string& body);

// Whether `signature` signs `message` (the text above).
using Verifier = std::function<bool(const std::string& message, const std::string& signature)>;
Verifier adminKeyVerifier(const std::string& admin_key);

// What a MUNGE credential made for a request carries (identity.h), so that it serves that request alone.
std::string mungePayload(const std::string& method, const std::string& path, const std::string& body);

// Remembers the nonces of the requests it accepted for as long as their times are acceptable, so each is
// accepted once. Thread-safe.
class ReplayGuard {
 public:
  // Whether the request is signed (as `verify` says), recent and new; `why` names the fault otherwise.
  bool accept(const Verifier& verify, const std::string& method, const std::string& path, const std::string& body,
              const std::string& time, const std::string& nonce, const std::string& signature, int64_t now_ms,
              std::string& why);

 private:
  std::mutex mu_;
  std::unordered_set<std::string> seen_;
  std::deque<std::pair<int64_t, std::string>> order_;  // (request time, nonce), to forget them in time
};

}  // namespace gpool::token
