// Which store a name means (store.h).
#include "store.h"

#include "etcd_store.h"
#include "model_json.h"
#include "sqlite_store.h"

namespace gpool::allocator {

Changes Changes::of(const Scheduler& s, const std::vector<std::string>& servers, const std::vector<std::string>& leases,
                    const std::string* policy_text) {
  Changes c;
  if (policy_text) c.policy = *policy_text;
  for (const auto& name : servers)
    if (auto it = s.servers().find(name); it != s.servers().end()) c.servers[name] = toJson(it->second).dump();
  for (const auto& id : leases)
    if (const Lease* l = s.lease(id)) c.leases[id] = {l->state, toJson(*l, LeaseView::kRecord).dump()};
  return c;
}

void Changes::add(Changes&& later) {
  if (later.policy) policy = std::move(later.policy);
  for (auto& [name, doc] : later.servers) servers[name] = std::move(doc);
  for (auto& [id, record] : later.leases) leases[id] = std::move(record);
}

bool Store::lead(Campaign c) {
  (void)c;
  return true;
}

std::unique_ptr<Store> openStore(const std::string& where, const EtcdAccess& access) {
  if (where.rfind("etcd://", 0) == 0) return std::make_unique<EtcdStore>(where, access);
  return std::make_unique<SqliteStore>(where);
}

}  // namespace gpool::allocator
