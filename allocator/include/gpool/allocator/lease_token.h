// Lease tokens: what the allocator signs for each share of a lease and a gpool-server verifies offline
// (Ed25519: the allocator holds the private key, GPU hosts the public one). Text form:
// "gpl2.<hex payload>.<hex signature>", where the payload is "lease|server|device|memory bytes|fraction|
// expiry unix seconds|share|hex user". A lease's shares are numbered from 0; two on one GPU differ only in it.
// The user is the one the lease is for, in hex (a name may hold any byte). (A token of six fields, from an
// allocator before the share number, is share 0; one of six or seven, from before the user, names none.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gpool/allocator/ed25519_key.h"

namespace gpool::token {

inline constexpr int kMaxShares = 1024;  // the most shares one lease may ask for

struct Claims {
  std::string lease, server;
  int device = 0;
  uint64_t memory = 0;
  double fraction = 1.0;
  int64_t expiry_s = 0;
  int share = 0;  // which of the lease's shares (each is a device of its own, with its own memory and time)
  std::string user;  // whom the lease is for (empty: a token from an allocator that did not say)
};

std::string sign(const Claims& c, const Ed25519Key& key);
// The claims of a token whose signature is valid, or nullopt with `why` set (malformed, forged).
// Expiry, server and device are for the caller to check (see check()).
std::optional<Claims> verify(const std::string& token, const Ed25519Key& key, std::string& why);
// verify() plus: not expired at `now_s`, issued for `server` and `device`.
std::optional<Claims> check(const std::string& token, const Ed25519Key& key, const std::string& server, int device,
                            int64_t now_s, std::string& why);

// HMAC-SHA256 of `data` under `key`, as hex (admin requests to the allocator use it: signed_request.h).
std::string hmacHex(const std::string& key, const std::string& data);
bool sameText(const std::string& a, const std::string& b);  // constant-time comparison
std::string sha256Hex(const std::string& data);
std::string hex(const unsigned char* p, size_t n);      // lower-case hex digits
std::optional<std::string> unhex(const std::string& s);  // nullopt unless lower-case hex digit pairs
std::string randomHex(size_t bytes);  // `bytes` random bytes from OpenSSL's generator, as hex; throws if none

// Reads the allocator's admin key file (at least 32 bytes of secret); creates one with 32 random bytes,
// mode 0600, when `create` and it does not exist. Throws std::runtime_error naming the file and the fix.
std::string loadKey(const std::string& path, bool create);

}  // namespace gpool::token
