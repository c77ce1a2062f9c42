// gpool-servers' requests: registration, heartbeats and clients that left. Each is signed with the
// server's own key (enrolled by an admin), with its time and a nonce (signed_request.h): accepted once,
// only while recent, and only about that server.
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "api_answers.h"
#include "gpool/printable.h"
#include "model_json.h"
#include "service.h"

namespace gpool::allocator {

using nlohmann::json;

namespace {

// What a server's heartbeat reports of the leases it serves (each part optional).
struct ServerReport {
  std::vector<std::string> serving;                          // lease ids it runs workers for
  std::vector<std::pair<std::string, double>> launches;      // lease → kernels its workers here launched
  std::vector<std::pair<std::string, Lease::Use>> uses;      // lease → what this server measured of its shares
};

bool servingValid(const json& list) {
  return list.is_array() && list.size() <= 4096 &&
         std::all_of(list.begin(), list.end(), [](const json& x) { return x.is_string() && x.get<std::string>().size() <= 64; });
}

bool launchesValid(const json& counts) {
  return counts.is_object() && counts.size() <= 4096 && std::all_of(counts.items().begin(), counts.items().end(), [](const auto& kv) {
           return kv.key().size() <= 64 && kv.value().is_number_unsigned() && kv.value().template get<uint64_t>() <= (1ull << 53);
         });
}

}  // namespace

// The caller is the enrolled server `about`; otherwise answers 401 or 403 and returns false.
bool Service::signedByServer(const httplib::Request& req, httplib::Response& res, const std::string& about) {
  std::string why;
  auto name = auth_.signedByServer(req, why);
  if (!name) return error(res, 401, why), false;
  if (*name != about) return error(res, 403, "server '" + *name + "' may speak only for itself, not '" + gpool::printable(about) + "'"), false;
  return true;
}

void Service::registerServer(const httplib::Request& req, httplib::Response& res) {
  json j;
  if (!parseBody(req, res, j)) return;
  if (!signedByServer(req, res, j.contains("name") && j["name"].is_string() ? j["name"].get<std::string>() : "")) return;
  Server srv;
  try {
    srv = serverFromJson(j);
    if (!gpool::isPlainName(srv.name) || srv.gpus.size() > 64 || srv.address.empty() || srv.address.size() > 256)
      throw std::invalid_argument("a name of 1-64 letters, digits, '-', '_' or '.', an address and at most 64 GPUs are required");
    for (const auto& g : srv.gpus)
      if (g.memory == 0 || g.index < 0) throw std::invalid_argument("every GPU needs an index and its memory");
  } catch (const std::exception& e) {
    return error(res, 400, std::string("bad server registration: ") + e.what());
  }
  std::lock_guard lock(mu_);
  spdlog::info("server {} at {} registered {} GPU(s)", srv.name, gpool::printable(srv.address), srv.gpus.size());
  std::string name = srv.name;
  sched_->registerServer(std::move(srv), now());
  persist();
  reply(res, 200, {{"heartbeat_ms", sched_->policy().server_timeout.count() / 3}, {"live", sched_->liveLeasesOn(name)}});
}

// Body (optional): {"serving": [lease ids it runs workers for], "launches": {lease: kernels}, "use": {lease:
// figures}}; the answer's `revoked` names the ended ones among those served, in every answer until the
// server reports them gone.
void Service::serverHeartbeat(const httplib::Request& req, httplib::Response& res) {
  json j;
  if (!signedByServer(req, res, req.matches[1]) || !parseBody(req, res, j)) return;
  ServerReport report;
  if (j.contains("serving")) {
    if (!servingValid(j["serving"])) return error(res, 400, "serving must be a list of at most 4096 lease ids");
    report.serving = j["serving"].get<std::vector<std::string>>();
  }
  if (j.contains("launches")) {
    if (!launchesValid(j["launches"]))
      return error(res, 400, "launches must map at most 4096 lease ids to counts of kernels (whole numbers up to 2^53)");
    for (const auto& [lease, n] : j["launches"].items()) report.launches.emplace_back(lease, n.get<double>());
  }
  if (j.contains("use")) {
    const json& all = j["use"];
    const std::string malformed = std::string("use must map at most 4096 lease ids to ") + kUseForm;
    if (!all.is_object() || all.size() > 4096) return error(res, 400, malformed);
    for (const auto& [lease, u] : all.items()) {
      auto use = useFrom(u);
      if (lease.size() > 64 || !use) return error(res, 400, malformed);
      report.uses.emplace_back(lease, *use);
    }
  }
  const std::string server = req.matches[1];
  std::lock_guard lock(mu_);
  std::vector<std::string> revoked;
  if (!sched_->heartbeatServer(server, now(), report.serving, revoked))
    return error(res, 404, "unknown server '" + server + "': register first");
  for (const auto& [lease, n] : report.launches) sched_->reportLaunches(server, lease, n, now());
  for (const auto& [lease, u] : report.uses) sched_->reportUse(server, lease, u);
  persist();
  reply(res, 200, {{"revoked", revoked}, {"live", sched_->liveLeasesOn(server)}, {"heartbeat_ms", sched_->policy().server_timeout.count() / 3}});
}

// The last client of a lease on that server left (a lease that ends with its clients then ends).
void Service::serverClientLeft(const httplib::Request& req, httplib::Response& res) {
  json j;
  if (!signedByServer(req, res, req.matches[1]) || !parseBody(req, res, j)) return;
  if (!j.contains("lease") || !j["lease"].is_string()) return error(res, 400, "body must be {\"lease\": ID}");
  std::lock_guard lock(mu_);
  bool ended = sched_->clientLeft(req.matches[1], j["lease"].get<std::string>(), now());
  persist();
  reply(res, 200, {{"ended", ended}});
}

}  // namespace gpool::allocator
