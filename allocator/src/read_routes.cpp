// Reads anyone may make: status (servers, GPUs, leases without their tokens, the queue, pools, queues),
// accounting, and the policy in force.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>

#include "api_answers.h"
#include "model_json.h"
#include "service.h"
#include "usage.h"

namespace gpool::allocator {

using nlohmann::json;

namespace {

// GET /v1/usage's window [from, to) in unix seconds, by default the last 7 days; nullopt (after
// answering 400) when a bound is not a time.
std::optional<std::pair<int64_t, int64_t>> usageWindow(const httplib::Request& req, httplib::Response& res, int64_t now_s) {
  int64_t window[2] = {0, now_s};
  for (int i : {0, 1}) {
    const char* name = i == 0 ? "from" : "to";
    if (!req.has_param(name)) continue;
    const std::string v = req.get_param_value(name);
    char* end = nullptr;
    window[i] = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || window[i] < 0 || window[i] > now_s + 366 * 86400)
      return error(res, 400, std::string(name) + " must be a time in unix seconds"), std::nullopt;
  }
  if (!req.has_param("from")) window[0] = std::max<int64_t>(0, window[1] - 7 * 86400);
  if (window[0] >= window[1]) return error(res, 400, "from must be before to"), std::nullopt;
  return std::pair{window[0], window[1]};
}

json poolJson(const Pool& p) {
  auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
  return {{"name", p.name}, {"servers", p.servers}, {"fractions", p.fractions}, {"isolation", isolationName(p.isolation)},
          {"placement", placementName(p.placement)}, {"order", orderName(p.order)},
          {"heterogeneity", heterogeneityName(p.heterogeneity)}, {"moves_per_hour", p.moves_per_hour},
          {"round_s", seconds(p.round)}, {"round_stay", p.round_stay}, {"max_time_s", seconds(p.max_time)},
          {"idle_timeout_s", seconds(p.idle_timeout)}};
}

json measuredJson(const Throughputs& t) {  // kind → type → what was measured
  json out = json::object();
  for (const auto& [kind, types] : t.measured())
    for (const auto& [type, m] : types) out[kind][type] = {{"per_second", m.rate}, {"samples", m.samples}};
  return out;
}

}  // namespace

// Accounting (usage.h): GPU time per user and group in [from, to), unix seconds.
void Service::usage(const httplib::Request& req, httplib::Response& res) {
  const int64_t now_s = unixSeconds();
  auto window = usageWindow(req, res, now_s);
  if (!window) return;
  std::map<std::string, Lease> leases;
  try {
    leases = leasesForUsage();
  } catch (const std::exception& e) {
    return error(res, 503, std::string("reading ended leases: ") + e.what());
  }
  json rows = json::array();  // summed from the copy: the scheduler's lock is not held for it
  for (const Usage& u : usageBetween(leases, window->first, window->second, now_s))
    rows.push_back({{"user", u.user}, {"group", u.group}, {"leases", u.leases}, {"gpu_seconds", u.gpu_seconds},
                    {"gpu_hours", u.gpu_seconds / 3600}, {"memory_gib_hours", u.memory_gib_seconds / 3600}});
  int64_t kept_s = 0;
  {
    std::lock_guard lock(mu_);
    kept_s = std::chrono::duration_cast<std::chrono::seconds>(sched_->policy().ended_lease_retention).count();
  }
  reply(res, 200, {{"from", window->first}, {"to", window->second}, {"kept_since", now_s - kept_s}, {"usage", rows}});
}

// Each server with its pool, its GPUs, and the shares of ended leases whose workers still run there
// (mu_ held).
json Service::serversJson() const {
  json servers = json::array();
  for (const auto& [name, srv] : sched_->servers()) {
    json j = toJson(srv);
    const Pool* p = sched_->policy().poolOfServer(name);
    j["pool"] = p ? p->name : "";
    json ending = json::array();
    for (const auto& d : sched_->drainingOn(name))
      ending.push_back({{"lease", d.lease}, {"device", d.device}, {"fraction", d.fraction}, {"memory", d.memory}});
    j["ended_leases_held"] = ending;
    servers.push_back(j);
  }
  return servers;
}

void Service::status(const httplib::Request&, httplib::Response& res) {
  std::lock_guard lock(mu_);
  json leases = json::array(), queue = json::array(), pools = json::array();
  for (const auto& [id, l] : sched_->live())
    if (l->state == LeaseState::kGranted) leases.push_back(withTimes(toJson(*l, LeaseView::kPublic), *l));
  int pos = 0;
  for (const Lease* l : sched_->queue()) {
    json j = toJson(*l, LeaseView::kPublic);
    j["position"] = ++pos;
    queue.push_back(j);
  }
  for (const auto& p : sched_->policy().pools) pools.push_back(poolJson(p));
  reply(res, 200, {{"servers", serversJson()}, {"leases", leases}, {"queue", queue}, {"pools", pools}, {"queues", queuesJson()},
                   {"measured_throughput", measuredJson(sched_->throughputs())},
                   {"measured_launch_rate", measuredJson(sched_->launchRates())},
                   {"leader", store_->replicated() ? json(opt_.advertise) : json(nullptr)}});
}

// The policy's queues (fair_share.h): guarantee, limit, weight, what each holds and borrows beyond its
// guarantee, and how many requests of its members wait. With mu_ held.
json Service::queuesJson() const {
  json out = json::array();
  const FairShare& fair = sched_->fairShare();
  if (!fair.active()) return out;
  std::map<std::string, int> waiting;  // queue name -> requests of its members that wait
  for (const Lease* l : sched_->queue())
    if (const Queue* q = sched_->policy().queueOf(l->req.user, l->req.chargedGroups())) ++waiting[q->name];
  for (const auto& v : fair.view()) {
    const Queue& q = *v.queue;
    double guaranteed = q.guarantee.gpus.value_or(0);
    json j{{"name", q.name}, {"parent", q.parent}, {"weight", q.weight}, {"guarantee_gpus", guaranteed}, {"held_gpus", v.gpus},
           {"held_memory", v.memory}, {"borrowed_gpus", std::max(0.0, v.gpus - guaranteed)}, {"waiting", waiting[q.name]}};
    j["limit_gpus"] = q.limit.gpus ? json(*q.limit.gpus) : json(nullptr);
    out.push_back(j);
  }
  return out;
}

void Service::policyText(const httplib::Request&, httplib::Response& res) {
  std::lock_guard lock(mu_);
  res.set_content(sched_->policy().source.empty() ? "# built-in defaults\n" : sched_->policy().source, "application/toml");
}

}  // namespace gpool::allocator
