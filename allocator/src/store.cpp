// Which store a name means (store.h).
#include "store.h"

#include "etcd_store.h"
#include "sqlite_store.h"

namespace gpool::allocator {

std::unique_ptr<Store> openStore(const std::string& where) {
  if (where.rfind("etcd://", 0) == 0) return std::make_unique<EtcdStore>(where);
  return std::make_unique<SqliteStore>(where);
}

}  // namespace gpool::allocator
