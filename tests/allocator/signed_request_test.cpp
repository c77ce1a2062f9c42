// Signed requests (gpool/allocator/signed_request.h): what the allocator's replay guard accepts and what
// it refuses, with the signature itself checked by the admin key's HMAC.
#include <gtest/gtest.h>

#include <string>

#include "gpool/allocator/lease_token.h"
#include "gpool/allocator/signed_request.h"

namespace gpool::token {
namespace {

const std::string kKey(32, 'k');
constexpr int64_t kNow = 1'800'000'000'000;  // unix milliseconds

std::string signature(const std::string& time, const std::string& nonce, const std::string& body) {
  return hmacHex(kKey, "POST /v1/x\n" + time + "\n" + nonce + "\n" + body);
}

TEST(ReplayGuard, AcceptsASignedRecentRequestOnceAndSaysWhyItRefusesTheRest) {
  ReplayGuard guard;
  Verifier verify = adminKeyVerifier(kKey);
  const std::string now = std::to_string(kNow), nonce(32, 'a');
  std::string why;
  EXPECT_TRUE(guard.accept(verify, "POST", "/v1/x", "{}", now, nonce, signature(now, nonce, "{}"), kNow, why)) << why;
  EXPECT_FALSE(guard.accept(verify, "POST", "/v1/x", "{}", now, nonce, signature(now, nonce, "{}"), kNow, why));
  EXPECT_NE(why.find("replayed"), std::string::npos) << why;

  const std::string other(32, 'b');
  EXPECT_FALSE(guard.accept(verify, "POST", "/v1/x", "{\"p\":1}", now, other, signature(now, other, "{}"), kNow, why))
      << "a body other than the one signed";
  EXPECT_NE(why.find("does not verify"), std::string::npos) << why;

  const std::string old = std::to_string(kNow - kSkewMs - 1000);
  EXPECT_FALSE(guard.accept(verify, "POST", "/v1/x", "{}", old, other, signature(old, other, "{}"), kNow, why));
  EXPECT_NE(why.find("stale or replayed"), std::string::npos) << why;

  for (const std::string& time : {std::string(""), std::string("12a"), std::string("-5"), std::string(20, '1')}) {
    EXPECT_FALSE(guard.accept(verify, "POST", "/v1/x", "{}", time, other, signature(time, other, "{}"), kNow, why)) << time;
    EXPECT_NE(why.find("not signed"), std::string::npos) << time << ": " << why;
  }
  EXPECT_FALSE(guard.accept(verify, "POST", "/v1/x", "{}", now, "ABC", signature(now, "ABC", "{}"), kNow, why));
  EXPECT_NE(why.find("not signed"), std::string::npos) << why;
}

// A time of 19 digits past int64's range, correctly signed (a signer's bug, or an enrolled server's own
// doing), is refused as far from the allocator's clock, not thrown at the request's handler.
TEST(ReplayGuard, ATimePastInt64IsRefusedAsFarFromTheClock) {
  ReplayGuard guard;
  Verifier verify = adminKeyVerifier(kKey);
  const std::string nonce(32, 'c');
  for (const std::string& time : {std::string(19, '9'), std::string("9223372036854775808")}) {
    std::string why;
    bool accepted = true;
    EXPECT_NO_THROW(accepted = guard.accept(verify, "POST", "/v1/x", "{}", time, nonce, signature(time, nonce, "{}"), kNow, why))
        << time;
    EXPECT_FALSE(accepted) << time;
    EXPECT_NE(why.find("from the allocator's time"), std::string::npos) << time << ": " << why;
  }
}

}  // namespace
}  // namespace gpool::token
