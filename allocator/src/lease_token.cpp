#include "gpool/allocator/lease_token.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "gpool/hex.h"
#include <stdexcept>
#include <vector>

namespace gpool::token {

std::string hex(const unsigned char* p, size_t n) { return hexOf(p, n); }

std::optional<std::string> unhex(const std::string& s) {
  std::string out(s.size() / 2, '\0');
  if (s.size() % 2 || !unhexTo(s, reinterpret_cast<uint8_t*>(out.data()), out.size())) return std::nullopt;
  return out;
}

namespace {

std::string mac(const std::string& payload, const std::string& key) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(payload.data()),
       payload.size(), out, &n);
  return hex(out, n);
}

}  // namespace

std::string hmacHex(const std::string& key, const std::string& data) { return mac(data, key); }

bool sameText(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string sha256Hex(const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out, &n, EVP_sha256(), nullptr);
  return hex(out, n);
}

std::string randomHex(size_t bytes) {
  std::vector<unsigned char> b(bytes);
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) throw std::runtime_error("no randomness from OpenSSL");
  return hex(b.data(), b.size());
}

std::string sign(const Claims& c, const Ed25519Key& key) {
  std::ostringstream p;
  p.precision(17);
  p << c.lease << '|' << c.server << '|' << c.device << '|' << c.memory << '|' << c.fraction << '|' << c.expiry_s << '|' << c.share << '|'
    << hex(reinterpret_cast<const unsigned char*>(c.user.data()), c.user.size());
  std::string payload = p.str();
  return "gpl2." + hex(reinterpret_cast<const unsigned char*>(payload.data()), payload.size()) + "." + key.sign(payload);
}

std::optional<Claims> verify(const std::string& token, const Ed25519Key& key, std::string& why) {
  if (token.size() > 4096 || token.rfind("gpl2.", 0) != 0) {
    why = "not a gpool lease token";
    return std::nullopt;
  }
  size_t dot = token.find('.', 5);
  if (dot == std::string::npos) {
    why = "malformed lease token";
    return std::nullopt;
  }
  auto payload = unhex(token.substr(5, dot - 5));
  std::string sig = token.substr(dot + 1);
  if (!payload) {
    why = "malformed lease token";
    return std::nullopt;
  }
  if (!key.verify(*payload, sig)) {
    why = "lease token signature does not verify (forged, or signed with another key)";
    return std::nullopt;
  }
  Claims c;
  std::vector<std::string> f;
  std::stringstream in(*payload);
  for (std::string part; std::getline(in, part, '|');) f.push_back(part);
  try {
    if (f.size() < 6 || f.size() > 8) throw std::invalid_argument("fields");
    c.lease = f[0];
    c.server = f[1];
    c.device = std::stoi(f[2]);
    c.memory = std::stoull(f[3]);
    c.fraction = std::stod(f[4]);
    c.expiry_s = std::stoll(f[5]);
    if (f.size() >= 7) c.share = std::stoi(f[6]);
    if (f.size() == 8) {
      auto user = unhex(f[7]);
      if (!user) throw std::invalid_argument("user");
      c.user = *user;
    }
    if (c.share < 0 || c.share >= kMaxShares) throw std::out_of_range("share");
  } catch (const std::exception&) {
    why = "malformed lease token claims";
    return std::nullopt;
  }
  return c;
}

std::optional<Claims> check(const std::string& token, const Ed25519Key& key, const std::string& server, int device,
                            int64_t now_s, std::string& why) {
  auto c = verify(token, key, why);
  if (!c) return c;
  if (c->expiry_s < now_s) {
    why = "lease token of lease " + c->lease + " expired " + std::to_string(now_s - c->expiry_s) + " s ago";
    return std::nullopt;
  }
  if (c->server != server) {
    why = "lease token of lease " + c->lease + " names server '" + c->server + "', not this one ('" + server + "')";
    return std::nullopt;
  }
  if (c->device != device) {
    why = "lease token of lease " + c->lease + " is for device " + std::to_string(c->device) + ", not " +
          std::to_string(device);
    return std::nullopt;
  }
  return c;
}

std::string loadKey(const std::string& path, bool create) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (!create)
      throw std::runtime_error("cannot read the admin key file " + path +
                               " (gpool-allocator creates it, beside its database, on first start)");
    unsigned char key[32];
    if (RAND_bytes(key, sizeof key) != 1) throw std::runtime_error("no randomness for a new admin key");
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) throw std::runtime_error("cannot create the admin key file " + path);
    std::string text = hex(key, sizeof key) + "\n";
    bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    if (!ok) throw std::runtime_error("cannot write the admin key file " + path);
    return hex(key, sizeof key);
  }
  std::string key((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ')) key.pop_back();
  if (key.size() < 32) throw std::runtime_error("admin key file " + path + " holds fewer than 32 bytes of secret");
  return key;
}

}  // namespace gpool::token
