// JSON forms of the allocator's records: used by the database (one JSON document per row) and the HTTP
// API (docs/api.md). Reading checks types and ranges; a bad document throws nlohmann::json::exception.
#pragma once

#include <nlohmann/json.hpp>

#include "scheduler.h"
#include "service_accounts.h"

namespace gpool::allocator {

nlohmann::json toJson(const Server& s);
Server serverFromJson(const nlohmann::json& j);
// What of a lease a reader sees: anyone its state and shares; its owner (or an admin) the shares' tokens
// too; the database also the hash of the owner's lease key.
enum class LeaseView { kPublic, kOwner, kRecord };
nlohmann::json toJson(const Lease& l, LeaseView view);
Lease leaseFromJson(const nlohmann::json& j);
nlohmann::json toJson(const LeaseRequest& r);
// A request as the API accepts it: n, p, m (bytes or "16GiB"), user, group, pool, priority, wait ("30s",
// seconds, or -1 for ever). Throws std::invalid_argument naming the field.
LeaseRequest requestFromJson(const nlohmann::json& j);
nlohmann::json toJson(const ServiceAccount& a);  // with the key's hash: for the database only
ServiceAccount serviceAccountFromJson(const nlohmann::json& j);

}  // namespace gpool::allocator
