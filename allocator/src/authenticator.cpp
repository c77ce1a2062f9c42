#include "authenticator.h"

#include "gpool/printable.h"
#include "local_socket.h"

namespace gpool::allocator {

bool Authenticator::signedWith(const token::Verifier& verify, const httplib::Request& req, std::string& why) {
  return replay_.accept(verify, req.method, req.path, req.body, req.get_header_value("X-Gpool-Time"), req.get_header_value("X-Gpool-Nonce"),
                        req.get_header_value("X-Gpool-Signature"), token::unixMillis(), why);
}

bool Authenticator::signedByAdminKey(const httplib::Request& req, std::string& why) {
  if (signedWith(token::adminKeyVerifier(key_), req, why)) return true;
  why += " (admin requests are signed with the allocator's key file)";
  return false;
}

std::optional<std::string> Authenticator::signedByServer(const httplib::Request& req, std::string& why) {
  std::string name = req.get_header_value("X-Gpool-Server");
  std::optional<token::Ed25519Key> key;
  {
    std::lock_guard lock(mu_);
    if (auto it = server_keys_.find(name); it != server_keys_.end()) key = it->second;
  }
  if (!key) {
    why = name.empty() ? "server requests name their server (X-Gpool-Server) and are signed with its key"
                       : "server '" + gpool::printable(name) + "' is not enrolled: an admin runs `gpool admin server enroll " +
                             gpool::printable(name) + " KEY.pub` with the public key gpool-server --server-key made";
    return std::nullopt;
  }
  auto verify = [&key](const std::string& m, const std::string& sig) { return key->verify(m, sig); };
  if (!signedWith(verify, req, why)) {
    why += " (signed with another key than server '" + gpool::printable(name) + "' enrolled?)";
    return std::nullopt;
  }
  return name;
}

void Authenticator::enrollServer(const std::string& name, const std::string& public_pem) {
  token::Ed25519Key key = token::Ed25519Key::fromPublicPem(public_pem);
  std::lock_guard lock(mu_);
  server_keys_.insert_or_assign(name, key);
}

bool Authenticator::removeServer(const std::string& name) {
  std::lock_guard lock(mu_);
  return server_keys_.erase(name) > 0;
}

void Authenticator::restoreServerKeys(const std::map<std::string, std::string>& public_pems) {
  std::lock_guard lock(mu_);
  server_keys_.clear();
  for (const auto& [name, pem] : public_pems) server_keys_.insert_or_assign(name, token::Ed25519Key::fromPublicPem(pem));
}

Authenticator::Outcome Authenticator::identify(const httplib::Request& req, Identity& who, std::string& why) {
  auto known = [&](std::optional<Identity> id) {
    if (!id) return Outcome::kRefused;
    who = std::move(*id);
    return Outcome::kKnown;
  };
  if (req.has_header("X-Gpool-Signature")) {
    if (!signedByAdminKey(req, why)) return Outcome::kRefused;
    Identity admin;
    admin.via = Via::kAdminKey;
    admin.user = "admin-key";
    admin.signed_by_admin_key = true;
    return known(admin);
  }
  std::string auth = req.get_header_value("Authorization");
  if (auth.empty()) {  // over the local socket, the kernel says who connected
    if (auto uid = LocalSocketServer::peerUid(req)) return known(identityOfUid(*uid, Via::kPeer, why));
    return Outcome::kAnonymous;
  }
  if (auth.rfind("MUNGE ", 0) == 0) return known(mungeIdentity(munge_socket_, auth.substr(6), req.method, req.path, req.body, why));
  if (auth.rfind("Bearer ", 0) == 0) {
    std::lock_guard lock(mu_);
    if (auto id = accounts_.identify(auth.substr(7))) return known(id);
    why = "unknown service account key (deleted, rotated, or mistyped)";
    return Outcome::kRefused;
  }
  why = "Authorization must be \"MUNGE <credential>\" or \"Bearer <service account key>\"";
  return Outcome::kRefused;
}

std::string Authenticator::issueKey(const std::string& name, const std::vector<std::string>& groups, bool rotate,
                                    int64_t now_unix_s, ServiceAccount& issued) {
  std::lock_guard lock(mu_);
  std::string key = accounts_.issue(name, groups, rotate, now_unix_s);
  issued = *accounts_.find(name);
  return key;
}

bool Authenticator::removeAccount(const std::string& name) {
  std::lock_guard lock(mu_);
  return accounts_.remove(name);
}

std::vector<ServiceAccount> Authenticator::accounts() {
  std::lock_guard lock(mu_);
  std::vector<ServiceAccount> out;
  for (const auto& [name, a] : accounts_.all()) out.push_back(a);
  return out;
}

void Authenticator::restoreAccounts(std::vector<ServiceAccount> accounts) {
  std::lock_guard lock(mu_);
  accounts_.restore(std::move(accounts));
}

}  // namespace gpool::allocator
