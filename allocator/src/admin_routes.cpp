// Admin changes: drains, the policy, queues, servers' keys, service accounts. Each needs an admin
// (Service::admin): the allocator's key, or a user the policy's access.admins names.
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "api_answers.h"
#include "gpool/printable.h"
#include "service.h"

namespace gpool::allocator {

using nlohmann::json;

void Service::drainServer(const httplib::Request& req, httplib::Response& res) {
  json j;
  if (!admin(req, res) || !parseBody(req, res, j)) return;
  bool drain = j.value("drain", true);
  std::lock_guard lock(mu_);
  if (!sched_->setDrain(req.matches[1], drain)) return error(res, 404, "unknown server '" + std::string(req.matches[1]) + "'");
  spdlog::info("server {} {}", std::string(req.matches[1]), drain ? "drained: no new shares" : "back in service");
  sched_->tick(now());
  persist();
  reply(res, 200, {{"server", std::string(req.matches[1])}, {"drain", drain}});
}

void Service::replacePolicy(const httplib::Request& req, httplib::Response& res) {
  auto who = admin(req, res);
  if (!who) return;
  Policy p;
  try {
    p = parsePolicy(req.body);
  } catch (const PolicyError& e) {
    return error(res, 400, e.what());
  }
  std::lock_guard lock(mu_);
  std::string text = p.source;
  json notes = p.notes;
  sched_->setPolicy(std::move(p), now());
  persist(&text);
  spdlog::info("policy replaced through the API by {} ({} pools)", gpool::printable(who->who.user), sched_->policy().pools.size());
  for (const auto& note : notes) spdlog::warn("policy: {}", note.get<std::string>());
  reply(res, 200, {{"pools", sched_->policy().pools.size()}, {"notes", notes}});
}

// Queues changed at run time (gpool admin queue): PUT sets the keys of a TOML table on queue NAME (made
// when new), DELETE removes it. The policy in force is rewritten, checked like any other, and applied.
void Service::changeQueue(const httplib::Request& req, httplib::Response& res, bool remove) {
  auto who = admin(req, res);
  if (!who) return;
  std::string name = req.matches[1];
  std::lock_guard lock(mu_);
  const auto& queues = sched_->policy().queues;
  if (remove && std::none_of(queues.begin(), queues.end(), [&](const Queue& q) { return q.name == name; }))
    return error(res, 404, "there is no queue '" + name + "'");
  Policy p;
  try {
    p = parsePolicy(withQueue(sched_->policy().source, name, remove ? nullptr : &req.body));
  } catch (const PolicyError& e) {
    return error(res, 400, e.what());
  }
  std::string text = p.source;
  sched_->setPolicy(std::move(p), now());
  persist(&text);
  spdlog::info("queue {} {} by {}", gpool::printable(name), remove ? "removed" : "changed", gpool::printable(who->who.user));
  reply(res, 200, {{"queue", name}, {"removed", remove}, {"queues", queuesJson()}});
}

// Enrolling a server: the public key its requests are verified with (PEM text).
void Service::enrollServer(const httplib::Request& req, httplib::Response& res) {
  auto who = admin(req, res);
  if (!who) return;
  std::string name = req.matches[1];
  if (!gpool::isPlainName(name)) return error(res, 400, "a server name is 1-64 letters, digits, '-', '_' or '.'");
  try {
    auth_.enrollServer(name, req.body);
  } catch (const std::exception& e) {
    return error(res, 400, std::string("the body must be the server's public key: ") + e.what());
  }
  std::lock_guard lock(mu_);
  commits_->direct([&] { store_->saveServerKey(name, &req.body); });
  spdlog::info("server {} enrolled by {}", name, gpool::printable(who->who.user));
  reply(res, 200, {{"server", name}, {"enrolled", true}});
}

void Service::unenrollServer(const httplib::Request& req, httplib::Response& res) {
  auto who = admin(req, res);
  if (!who) return;
  std::string name = req.matches[1];
  if (!auth_.removeServer(name)) return error(res, 404, "server '" + gpool::printable(name) + "' is not enrolled");
  std::lock_guard lock(mu_);
  commits_->direct([&] { store_->saveServerKey(name, nullptr); });
  spdlog::info("server {} unenrolled by {}: its requests are refused from now on", name, gpool::printable(who->who.user));
  reply(res, 200, {{"server", name}, {"enrolled", false}});
}

void Service::issueServiceAccount(const httplib::Request& req, httplib::Response& res) {
  json j;
  auto who = admin(req, res);
  if (!who || !parseBody(req, res, j)) return;
  ServiceAccount issued;
  std::string key;
  try {
    if (!j.contains("name") || !j["name"].is_string()) throw std::invalid_argument("body must be {\"name\": NAME, \"groups\": [...]}");
    auto groups = j.value("groups", std::vector<std::string>{});
    key = auth_.issueKey(j["name"].get<std::string>(), groups, j.value("rotate", false), unixSeconds(), issued);
  } catch (const std::exception& e) {
    return error(res, 400, e.what());
  }
  std::lock_guard lock(mu_);
  commits_->direct([&] { store_->saveServiceAccount(issued.name, &issued); });
  spdlog::info("service account {} {} by {}", issued.name, j.value("rotate", false) ? "given a new key" : "created",
               gpool::printable(who->who.user));
  reply(res, 201, {{"name", issued.name}, {"groups", issued.groups}, {"key", key}});
}

void Service::listServiceAccounts(const httplib::Request& req, httplib::Response& res) {
  if (!admin(req, res)) return;
  json out = json::array();
  for (const auto& a : auth_.accounts()) out.push_back({{"name", a.name}, {"groups", a.groups}, {"created_unix_s", a.created_unix_s}});
  reply(res, 200, {{"service_accounts", out}});
}

void Service::deleteServiceAccount(const httplib::Request& req, httplib::Response& res) {
  if (!admin(req, res)) return;
  std::string name = req.matches[1];
  if (!auth_.removeAccount(name)) return error(res, 404, "no service account '" + gpool::printable(name) + "'");
  std::lock_guard lock(mu_);
  commits_->direct([&] { store_->saveServiceAccount(name, nullptr); });
  spdlog::info("service account {} deleted", name);
  reply(res, 200, {{"name", name}, {"deleted", true}});
}

}  // namespace gpool::allocator
