// Users and groups from this host's user database; MUNGE credentials decoded through munged.
#include "identity.h"

#include <grp.h>
#include <munge.h>
#include <pwd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "gpool/allocator/signed_request.h"

namespace gpool::allocator {

const char* viaName(Via v) {
  switch (v) {
    case Via::kMunge: return "munge";
    case Via::kPeer: return "peer";
    case Via::kServiceKey: return "service key";
    case Via::kAdminKey: return "admin key";
  }
  return "?";
}

bool Identity::inGroup(const std::string& g) const { return std::find(groups.begin(), groups.end(), g) != groups.end(); }

namespace {

std::optional<std::string> groupName(gid_t gid) {
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  if (getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) != 0 || !found) return std::nullopt;
  return std::string(found->gr_name);
}

}  // namespace

std::optional<Identity> identityOfUid(uid_t uid, Via via, std::string& why) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || !found) {
    why = "uid " + std::to_string(uid) + " has no user on the allocator's host (the allocator needs the same users "
          "as the hosts its clients run on: the same /etc/passwd, LDAP or SSSD)";
    return std::nullopt;
  }
  Identity id;
  id.via = via;
  id.user = found->pw_name;
  int n = 64;
  std::vector<gid_t> gids(static_cast<size_t>(n));
  if (getgrouplist(found->pw_name, found->pw_gid, gids.data(), &n) < 0) {
    gids.resize(static_cast<size_t>(n));
    getgrouplist(found->pw_name, found->pw_gid, gids.data(), &n);
  }
  gids.resize(static_cast<size_t>(std::max(n, 0)));
  id.group = groupName(found->pw_gid).value_or(std::to_string(found->pw_gid));
  id.groups.push_back(id.group);
  for (gid_t g : gids)
    if (auto name = groupName(g); name && !id.inGroup(*name)) id.groups.push_back(*name);
  return id;
}

std::optional<Identity> mungeIdentity(const std::string& socket, const std::string& credential, const std::string& method,
                                      const std::string& path, const std::string& body, std::string& why) {
  std::unique_ptr<std::remove_pointer_t<munge_ctx_t>, decltype(&munge_ctx_destroy)> ctx(munge_ctx_create(), munge_ctx_destroy);
  if (!ctx) {
    why = "out of memory decoding a MUNGE credential";
    return std::nullopt;
  }
  if (!socket.empty()) munge_ctx_set(ctx.get(), MUNGE_OPT_SOCKET, socket.c_str());
  void* payload = nullptr;
  int length = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  munge_err_t err = munge_decode(credential.c_str(), ctx.get(), &payload, &length, &uid, &gid);
  std::string carried = payload ? std::string(static_cast<const char*>(payload), static_cast<size_t>(length)) : "";
  std::free(payload);
  if (err == EMUNGE_SOCKET) {
    why = std::string("the allocator cannot reach munged (") + munge_ctx_strerror(ctx.get()) + "): start munged on the allocator's host";
    return std::nullopt;
  }
  if (err != EMUNGE_SUCCESS) {
    why = std::string("MUNGE credential refused: ") + munge_ctx_strerror(ctx.get()) +
          (err == EMUNGE_CRED_REPLAYED ? " (each credential serves one request)" : "");
    return std::nullopt;
  }
  if (carried != token::mungePayload(method, path, body)) {
    why = "MUNGE credential refused: it was made for another request";
    return std::nullopt;
  }
  return identityOfUid(uid, Via::kMunge, why);
}

}  // namespace gpool::allocator
