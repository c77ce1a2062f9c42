#include "authenticator.h"

#include "local_socket.h"

namespace gpool::allocator {

bool Authenticator::signedWithKey(const httplib::Request& req, std::string& why) {
  return replay_.accept(key_, req.method, req.path, req.body, req.get_header_value("X-Gpool-Time"), req.get_header_value("X-Gpool-Nonce"),
                        req.get_header_value("X-Gpool-Signature"), token::unixMillis(), why);
}

Authenticator::Outcome Authenticator::identify(const httplib::Request& req, Identity& who, std::string& why) {
  auto known = [&](std::optional<Identity> id) {
    if (!id) return Outcome::kRefused;
    who = std::move(*id);
    return Outcome::kKnown;
  };
  if (req.has_header("X-Gpool-Signature")) {
    if (!signedWithKey(req, why)) return Outcome::kRefused;
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
