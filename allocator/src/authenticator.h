// Who is calling gpool-allocator, from what the request proves (identity.h): the local socket's peer, a
// MUNGE credential, a service account's key, or a signature with the allocator's admin key. Requests from
// gpool-servers are signed with each server's own Ed25519 key, which an admin enrolled. Thread-safe.
#pragma once

#include <httplib.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gpool/allocator/signed_request.h"
#include "identity.h"
#include "service_accounts.h"

namespace gpool::allocator {

class Authenticator {
 public:
  Authenticator(std::string key, std::string munge_socket) : key_(std::move(key)), munge_socket_(std::move(munge_socket)) {}

  enum class Outcome {
    kAnonymous,  // the request proves nothing (and claims nothing)
    kKnown,      // `who` is set
    kRefused,    // it carries a credential that does not hold: `why` says why
  };
  Outcome identify(const httplib::Request& req, Identity& who, std::string& why);
  // The server (X-Gpool-Server) whose enrolled key signed the request, recent and not seen before; nullopt
  // with `why` set otherwise.
  std::optional<std::string> signedByServer(const httplib::Request& req, std::string& why);

  // Enrolled servers' public keys (the caller persists what changed). enrollServer throws
  // std::invalid_argument for a bad name or key.
  void enrollServer(const std::string& name, const std::string& public_pem);
  bool removeServer(const std::string& name);
  void restoreServerKeys(const std::map<std::string, std::string>& public_pems);

  // Service accounts (the registry is guarded here; the caller persists what changed).
  std::string issueKey(const std::string& name, const std::vector<std::string>& groups, bool rotate, int64_t now_unix_s,
                       ServiceAccount& issued);
  bool removeAccount(const std::string& name);
  std::vector<ServiceAccount> accounts();
  void restoreAccounts(std::vector<ServiceAccount> accounts);

  // The ways to prove who one is, for messages.
  static constexpr const char* kHowToIdentify =
      "send a MUNGE credential (munged running on this host), connect to the allocator's local socket, or use a "
      "service account's key (GPOOL_SERVICE_KEY_FILE)";

 private:
  std::string key_, munge_socket_;
  token::ReplayGuard replay_;
  bool signedByAdminKey(const httplib::Request& req, std::string& why);
  bool signedWith(const token::Verifier& verify, const httplib::Request& req, std::string& why);

  std::mutex mu_;
  ServiceAccounts accounts_;
  std::map<std::string, token::Ed25519Key> server_keys_;
};

}  // namespace gpool::allocator
