#include "gpool/allocator/signed_request.h"

#include <charconv>
#include <chrono>
#include <stdexcept>

#include "gpool/allocator/lease_token.h"

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

static Headers signWith(const std::function<std::string(const std::string&)>& sign, const std::string& method,
                        const std::string& path, const std::string& body) {
  std::string nonce = randomHex(16);
  std::string time = std::to_string(unixMillis());
  return {{"X-Gpool-Time", time}, {"X-Gpool-Nonce", nonce}, {"X-Gpool-Signature", sign(message(method, path, time, nonce, body))}};
}

Headers signRequest(const std::string& admin_key, const std::string& method, const std::string& path, const std::string& body) {
  return signWith([&](const std::string& m) { return hmacHex(admin_key, m); }, method, path, body);
}

Headers signRequest(const Ed25519Key& server_key, const std::string& server, const std::string& method, const std::string& path,
                    const std::string& body) {
  Headers h = signWith([&](const std::string& m) { return server_key.sign(m); }, method, path, body);
  h.emplace_back("X-Gpool-Server", server);
  return h;
}

Verifier adminKeyVerifier(const std::string& admin_key) {
  return [admin_key](const std::string& m, const std::string& signature) { return sameText(signature, hmacHex(admin_key, m)); };
}

std::string mungePayload(const std::string& method, const std::string& path, const std::string& body) {
  return "gpool1 " + method + " " + path + " " + sha256Hex(body);
}

bool ReplayGuard::accept(const Verifier& verify, const std::string& method, const std::string& path, const std::string& body,
                         const std::string& time, const std::string& nonce, const std::string& signature, int64_t now_ms,
                         std::string& why) {
  if (!isHex(nonce, 32) || time.empty() || time.size() > 19 || time.find_first_not_of("0123456789") != std::string::npos) {
    why = "request not signed (X-Gpool-Time and X-Gpool-Nonce missing or malformed)";
    return false;
  }
  if (!verify(message(method, path, time, nonce, body), signature)) {
    why = "request signature does not verify";
    return false;
  }
  int64_t at = 0;
  if (std::from_chars(time.data(), time.data() + time.size(), at).ec != std::errc{}) {  // past int64: 19 digits may be
    why = "request made at " + time + " ms, far from the allocator's time (check the clocks)";
    return false;
  }
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
