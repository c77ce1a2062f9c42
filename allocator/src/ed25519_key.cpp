#include "gpool/allocator/ed25519_key.h"

#include "gpool/allocator/lease_token.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <vector>

namespace gpool::token {
namespace {

std::shared_ptr<EVP_PKEY> own(EVP_PKEY* k) { return std::shared_ptr<EVP_PKEY>(k, EVP_PKEY_free); }

bool isEd25519(EVP_PKEY* k) { return k && EVP_PKEY_id(k) == EVP_PKEY_ED25519; }

// Writes `text` to a new file `path` with `mode`; false when it exists or cannot be written.
bool writeNew(const std::string& path, const std::string& text, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

std::string privatePem(EVP_PKEY* k) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  PEM_write_bio_PrivateKey(bio.get(), k, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// The Ed25519 key `read` finds in the PEM file at `path`; nullptr when it holds none.
std::shared_ptr<EVP_PKEY> readPem(const std::string& path, EVP_PKEY* (*read)(FILE*, EVP_PKEY**, pem_password_cb*, void*)) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return nullptr;
  EVP_PKEY* k = read(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  if (isEd25519(k)) return own(k);
  EVP_PKEY_free(k);
  return nullptr;
}

}  // namespace

Ed25519Key Ed25519Key::generate() {
  EVP_PKEY* k = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  if (!k) throw std::runtime_error("cannot generate an Ed25519 key");
  return Ed25519Key(own(k), true);
}

std::string Ed25519Key::publicPath(const std::string& path) {
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".pem") == 0) return path.substr(0, path.size() - 4) + ".pub";
  return path + ".pub";
}

Ed25519Key Ed25519Key::loadPrivate(const std::string& path, bool create) {
  if (::access(path.c_str(), F_OK) != 0 && create) {
    Ed25519Key k = generate();
    if (!writeNew(path, privatePem(k.key_.get()), 0600) || !writeNew(publicPath(path), k.publicPem(), 0644))
      throw std::runtime_error("cannot create the key files " + path + " and " + publicPath(path));
    return k;
  }
  auto k = readPem(path, PEM_read_PrivateKey);
  if (!k) throw std::runtime_error("cannot read an Ed25519 private key in PEM from " + path + " (make one: openssl genpkey -algorithm ed25519)");
  return Ed25519Key(k, true);
}

Ed25519Key Ed25519Key::loadPublic(const std::string& path) {
  auto k = readPem(path, PEM_read_PUBKEY);
  if (!k) throw std::runtime_error("cannot read an Ed25519 public key in PEM from " + path);
  return Ed25519Key(k, false);
}

Ed25519Key Ed25519Key::fromPublicPem(const std::string& pem) {
  if (pem.size() > 4096) throw std::invalid_argument("not an Ed25519 public key in PEM (too long)");
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  EVP_PKEY* k = PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr);
  if (!isEd25519(k)) {
    EVP_PKEY_free(k);
    throw std::invalid_argument("not an Ed25519 public key in PEM");
  }
  return Ed25519Key(own(k), false);
}

std::string Ed25519Key::sign(const std::string& message) const {
  if (!private_) throw std::logic_error("signing needs the private key");
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char sig[64];
  size_t n = sizeof sig;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &n, reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1)
    throw std::runtime_error("Ed25519 signing failed");
  return hex(sig, n);
}

bool Ed25519Key::verify(const std::string& message, const std::string& signature_hex) const {
  auto sig = signature_hex.size() == 128 ? unhex(signature_hex) : std::nullopt;
  if (!sig) return false;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  return ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) == 1 &&
         EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig->data()), sig->size(), reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
}

std::string Ed25519Key::publicPem() const {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  PEM_write_bio_PUBKEY(bio.get(), key_.get());
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

}  // namespace gpool::token
