// Who sent a request to gpool-allocator: found out, never taken from the request's body. A caller proves
// who it is in one of four ways (docs/security.md, "Identity"):
//   MUNGE          Authorization: MUNGE <credential>. munged says which uid made it (clusters running Slurm
//                  already share its key); the credential's payload binds it to this method, path and body,
//                  and munged accepts each credential once.
//   peer           a connection on the allocator's local Unix socket: the kernel says which uid it is.
//   service key    Authorization: Bearer <key>, a key an admin issued to a service account (service_accounts.h).
//   admin key      the request is signed with the allocator's key (signed_request.h).
// A uid becomes the user and groups this host's user database (NSS: files, LDAP, ...) gives it.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace gpool::allocator {

enum class Via { kMunge, kPeer, kServiceKey, kAdminKey };
const char* viaName(Via v);

struct Identity {
  Via via = Via::kMunge;
  std::string user;
  std::string group;                // the primary group: the one a lease is charged to unless it names another
  std::vector<std::string> groups;  // every group, the primary one included
  bool signed_by_admin_key = false;

  bool inGroup(const std::string& g) const;
};

// The user of `uid` and its groups from this host's user database, or nullopt with `why` set.
std::optional<Identity> identityOfUid(uid_t uid, Via via, std::string& why);

// Decodes a MUNGE credential through the munged at `socket` ("" = munged's default socket) and checks that
// it was made for this request. The identity, or nullopt with `why` set (expired, replayed, unknown uid,
// munged unreachable: the message names the fix).
std::optional<Identity> mungeIdentity(const std::string& socket, const std::string& credential, const std::string& method,
                                      const std::string& path, const std::string& body, std::string& why);

}  // namespace gpool::allocator
