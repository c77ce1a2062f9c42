// Ed25519 keys (OpenSSL), in PEM files: the allocator signs lease tokens with its private key and GPU hosts
// verify them with the public one; each gpool-server signs its requests with a key of its own, whose
// public half an admin enrolls at the allocator. A host holding only public keys and its own private key
// can neither mint tokens nor speak for another server.
#pragma once

#include <memory>
#include <string>

typedef struct evp_pkey_st EVP_PKEY;

namespace gpool::token {

class Ed25519Key {
 public:
  static Ed25519Key generate();
  // The private key in PEM file `path`. When it is missing and `create`: a new one, written mode 0600,
  // with its public key beside it (publicPath(path)). Throws std::runtime_error naming the file and fix.
  static Ed25519Key loadPrivate(const std::string& path, bool create);
  static Ed25519Key loadPublic(const std::string& path);         // a PEM public key file
  static Ed25519Key fromPublicPem(const std::string& pem);       // throws std::invalid_argument
  // Where the public half of the private key file `path` goes: "x.pem" → "x.pub", else path + ".pub".
  static std::string publicPath(const std::string& path);

  bool hasPrivate() const { return private_; }
  std::string sign(const std::string& message) const;  // hex (128 digits); throws for a public key
  bool verify(const std::string& message, const std::string& signature_hex) const;
  std::string publicPem() const;

 private:
  Ed25519Key(std::shared_ptr<EVP_PKEY> key, bool is_private) : key_(std::move(key)), private_(is_private) {}
  std::shared_ptr<EVP_PKEY> key_;
  bool private_ = false;
};

}  // namespace gpool::token
