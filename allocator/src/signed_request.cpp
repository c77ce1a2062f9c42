#include "signed_request.h"

#include <chrono>
#include <stdexcept>

#include "lease_token.h"

namespace gpool::token {

namespace {
std::string message(const std::string& method, const std::string& path, const std::string& time, const std::string& nonce,
                    const std::string& body) {
  return method + " " + path + "\n" + time + "\n" + nonce + "\n" + body;
}

bool isHex(const std::string& s, size_t size) {
  if (s.size() != size) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}
}  // namespace

int64_t unixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<std::pair<std::string, std::string>> signRequest(const std::string& key, const std::string& method,
                                                             const std::string& path, const std::string& body) {
  std::string nonce = randomHex(16);
  std::string time = std::to_string(unixMillis());
  return {{"X-Gpool-Time", time}, {"X-Gpool-Nonce", nonce}, {"X-Gpool-Signature", hmacHex(key, message(method, path, time, nonce, body))}};
}

std::string mungePayload(const std::string& method, const std::string& path, const std::string& body) {
  return "gpool1 " + method + " " + path + " " + sha256Hex(body);
}

bool ReplayGuard::accept(const std::string& key, const std::string& method, const std::string& path, const std::string& body,
                         const std::string& time, const std::string& nonce, const std::string& signature, int64_t now_ms,
                         std::string& why) {
  if (!isHex(nonce, 32) || time.empty() || time.size() > 19 || time.find_first_not_of("0123456789") != std::string::npos) {
    why = "request not signed with the allocator's key (X-Gpool-Time and X-Gpool-Nonce missing or malformed)";
    return false;
  }
  if (!sameText(signature, hmacHex(key, message(method, path, time, nonce, body)))) {
    why = "request not signed with the allocator's key";
    return false;
  }
  int64_t at = std::stoll(time);
  if (at < now_ms - kSkewMs || at > now_ms + kSkewMs) {
    why = "request made " + std::to_string((now_ms - at) / 1000) + " s from the allocator's time (stale or replayed; check the clocks)";
    return false;
  }
  std::lock_guard lock(mu_);
  while (!order_.empty() && order_.front().first < now_ms - 2 * kSkewMs) {  // too old to be accepted again anyway
    seen_.erase(order_.front().second);
    order_.pop_front();
  }
  if (!seen_.insert(nonce).second) {
    why = "request replayed (its nonce was used already)";
    return false;
  }
  order_.emplace_back(at, nonce);
  return true;
}

}  // namespace gpool::token
