// TOML → Policy, with checks. Example: docs/admin.md ("Partition policy").
#include "policy.h"

#include <toml++/toml.h>

#include "gpool/printable.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace gpool::allocator {
namespace {

[[noreturn]] void fail(const std::string& what) { throw PolicyError("policy: " + what); }

double number(const toml::node& n, const std::string& where) {
  if (auto v = n.value<double>()) return *v;  // integers convert too
  fail(where + " must be a number");
}

std::string text(const toml::node& n, const std::string& where) {
  if (auto v = n.value<std::string>()) return *v;
  fail(where + " must be a string");
}

std::chrono::milliseconds duration(const toml::node& n, const std::string& where) {
  // Integer seconds: integers only (toml++ converts floats out of range unchecked), and in range before
  // the conversion to milliseconds can overflow (both found by fuzz_policy).
  if (const auto* v = n.as_integer()) {
    if (v->get() < 0 || v->get() > 30 * 86400) fail(where + " must be between 0 and 30 days");
    return std::chrono::seconds(v->get());
  }
  try {
    if (auto v = n.value<std::string>()) return parseDuration(*v);
  } catch (const UnitError& e) {
    fail(where + ": " + e.what());
  }
  fail(where + " must be a duration such as \"15s\" or \"500ms\"");
}

uint64_t size(const toml::node& n, const std::string& where) {
  try {
    if (auto v = n.value<std::string>()) return parseSize(*v);
    if (const auto* v = n.as_integer(); v && v->get() >= 0) return static_cast<uint64_t>(v->get());
  } catch (const UnitError& e) {
    fail(where + ": " + e.what());
  }
  fail(where + " must be a size such as \"80GiB\" or a number of bytes");
}

void checkKeys(const toml::table& t, const std::set<std::string>& allowed, const std::string& where) {
  for (const auto& [k, v] : t) {
    (void)v;
    if (!allowed.count(std::string(k.str())))
      fail("unknown key '" + std::string(k.str()) + "' in " + where);
  }
}

Quota quota(const toml::node& n, const std::string& where) {
  const toml::table* t = n.as_table();
  if (!t) fail(where + " must be a table with gpus and/or memory");
  checkKeys(*t, {"gpus", "memory"}, where);
  Quota q;
  if (auto g = t->get("gpus")) {
    q.gpus = number(*g, where + ".gpus");
    if (!(*q.gpus >= 0) || *q.gpus > 1e6) fail(where + ".gpus must be between 0 and 1e6");
  }
  if (auto m = t->get("memory")) q.memory = size(*m, where + ".memory");
  return q;
}

std::vector<std::string> members(const toml::node& n, const std::string& where) {
  const toml::array* a = n.as_array();
  if (!a) fail(where + " must be a list of user names and @groups");
  std::vector<std::string> out;
  for (const auto& e : *a) {
    std::string m = text(e, where + "[]");
    if (m.empty() || m == "@") fail(where + " has an empty member");
    out.push_back(m);
  }
  return out;
}

Access access(const toml::table& t, const Policy& p) {
  checkKeys(t, {"admins", "priorities"}, "[access]");
  Access a;
  if (auto n = t.get("admins")) a.admins = members(*n, "access.admins");
  if (auto n = t.get("priorities")) {
    const toml::table* pr = n->as_table();
    if (!pr) fail("access.priorities must be a table: class = [members]");
    for (const auto& [k, v] : *pr) {
      std::string cls(k.str());
      if (!p.priorities.count(cls)) fail("access.priorities." + cls + ": no such class in [priorities]");
      a.priorities[cls] = members(v, "access.priorities." + cls);
    }
  }
  return a;
}

}  // namespace

const char* isolationName(Isolation i) {
  switch (i) {
    case Isolation::kExclusive: return "exclusive";
    case Isolation::kSpatial: return "spatial";
    default: return "process";
  }
}

const char* placementName(Placement p) { return p == Placement::kSpread ? "spread" : "pack"; }

const char* heterogeneityName(Heterogeneity h) { return h == Heterogeneity::kAgnostic ? "agnostic" : "aware"; }

const char* orderName(Order o) {
  switch (o) {
    case Order::kShortestFirst: return "shortest-first";
    case Order::kLeastAttained: return "least-attained";
    case Order::kMaxMin: return "max-min";
    default: return "fifo";
  }
}

bool Access::isMember(const std::vector<std::string>& members, const std::string& user, const std::vector<std::string>& groups) {
  for (const auto& m : members) {
    if (m == user) return true;
    if (m.size() > 1 && m[0] == '@' && std::find(groups.begin(), groups.end(), m.substr(1)) != groups.end()) return true;
  }
  return false;
}

bool Access::mayUsePriority(const std::string& cls, const std::string& user, const std::vector<std::string>& groups) const {
  auto it = priorities.find(cls);
  return it == priorities.end() || isMember(it->second, user, groups) || isAdmin(user, groups);
}

const Pool* Policy::pool(const std::string& name) const {
  for (const auto& p : pools)
    if (p.name == name) return &p;
  return nullptr;
}

const Pool* Policy::poolOfServer(const std::string& server) const {
  for (const auto& p : pools)
    if (std::find(p.servers.begin(), p.servers.end(), server) != p.servers.end()) return &p;
  for (const auto& p : pools)
    if (std::find(p.servers.begin(), p.servers.end(), "*") != p.servers.end()) return &p;
  return nullptr;
}

std::string Policy::gpuTypeOf(const std::string& model) const {
  for (const auto& [type, patterns] : gpu_types)
    for (const auto& pattern : patterns)
      if (::fnmatch(pattern.c_str(), model.c_str(), FNM_CASEFOLD) == 0) return type;
  if (model.rfind("gpool sim", 0) == 0) return "sim";  // gpool-server --backend sim
  std::vector<std::string> words;
  std::string word;
  for (char c : model + " ") {
    if (c != ' ' && c != '-') {
      word += c;
    } else if (!word.empty()) {
      if (word != "NVIDIA" && word != "Tesla" && word != "GeForce" && word != "Quadro") words.push_back(word);
      word.clear();
    }
  }
  if (words.empty()) return "unknown";
  if ((words[0] == "RTX" || words[0] == "GTX") && words.size() > 1) return words[0] + words[1];  // RTX4090
  return words[0];
}

double Policy::relativeSpeed(const std::string& kind, const std::string& type) const {
  auto k = job_kinds.find(kind);
  if (k == job_kinds.end()) return 1;
  auto t = k->second.find(type);
  if (t == k->second.end()) return 1;
  double best = 0;
  for (const auto& [ty, x] : k->second) best = std::max(best, x);
  return best > 0 ? t->second / best : 1;
}

const Queue* Policy::queueOf(const std::string& user, const std::vector<std::string>& groups) const {
  for (const auto& q : queues)
    if (std::find(q.members.begin(), q.members.end(), user) != q.members.end()) return &q;
  for (const auto& q : queues)
    if (Access::isMember(q.members, "", groups)) return &q;
  return nullptr;
}

namespace {

std::map<std::string, std::map<std::string, double>> jobKinds(const toml::table& t) {
  std::map<std::string, std::map<std::string, double>> out;
  for (const auto& [k, v] : t) {
    std::string kind(k.str()), where = "job_kinds." + kind;
    if (kind.empty() || kind.size() > 64 || !gpool::isPrintable(kind)) fail("job kind names are 1-64 printable characters");
    const toml::table* speeds = v.as_table();
    if (!speeds || speeds->empty()) fail(where + " must be a table of GPU type = throughput, e.g. { H100 = 3.1, A100 = 1.7 }");
    for (const auto& [ty, x] : *speeds) {
      double rate = number(x, where + "." + std::string(ty.str()));
      if (!(rate >= 0) || rate > 1e12) fail(where + "." + std::string(ty.str()) + " must be a throughput >= 0");
      out[kind][std::string(ty.str())] = rate;
    }
  }
  return out;
}

// The value among `values` whose name (nameOf) the node holds; fails listing the names otherwise.
template <typename E>
E oneOf(const toml::node& n, const std::string& where, std::initializer_list<E> values, const char* (*nameOf)(E)) {
  std::string name = text(n, where), names;
  for (E x : values) {
    if (name == nameOf(x)) return x;
    names += std::string(names.empty() ? "" : ", ") + nameOf(x);
  }
  fail(where + " must be one of " + names + " (not '" + name + "')");
}

std::map<std::string, std::vector<std::string>> gpuTypes(const toml::table& t) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [k, v] : t) {
    std::string name(k.str()), where = "gpu_types." + name;
    if (!gpool::isPlainName(name)) fail("GPU type names are 1-64 letters, digits, '.', '_' or '-' (not '" + gpool::printable(name) + "')");
    const toml::array* a = v.as_array();
    if (!a || a->empty()) fail(where + " must be a list of model patterns, e.g. [\"NVIDIA H100*\"]");
    for (const auto& e : *a) out[name].push_back(text(e, where + "[]"));
  }
  return out;
}

Queue queue(const std::string& name, const toml::node& n) {
  std::string where = "queues." + name;
  const toml::table* t = n.as_table();
  if (!t) fail(where + " must be a table");
  checkKeys(*t, {"parent", "guarantee", "limit", "weight", "members"}, where);
  if (!gpool::isPlainName(name)) fail("queue names are 1-64 letters, digits, '.', '_' or '-' (not '" + gpool::printable(name) + "')");
  Queue q;
  q.name = name;
  if (auto v = t->get("parent")) q.parent = text(*v, where + ".parent");
  if (auto v = t->get("guarantee")) q.guarantee = quota(*v, where + ".guarantee");
  if (auto v = t->get("limit")) q.limit = quota(*v, where + ".limit");
  if (auto v = t->get("weight")) q.weight = number(*v, where + ".weight");
  if (!(q.weight > 0 && q.weight <= 1e6)) fail(where + ".weight must be in (0, 1e6]");
  if (auto v = t->get("members")) q.members = members(*v, where + ".members");
  if (q.guarantee.gpus && q.limit.gpus && *q.guarantee.gpus > *q.limit.gpus)
    fail(where + ": the guarantee of " + formatNumber(*q.guarantee.gpus) + " GPUs exceeds the limit of " + formatNumber(*q.limit.gpus));
  if (q.guarantee.memory && q.limit.memory && *q.guarantee.memory > *q.limit.memory)
    fail(where + ": the guaranteed memory exceeds the memory limit");
  return q;
}

// Parents before children, each parent defined, no cycle, and the children's guarantees within their
// parent's.
void orderQueues(std::vector<Queue>& queues) {
  std::vector<Queue> ordered;
  std::set<std::string> placed;
  while (ordered.size() < queues.size()) {
    size_t before = ordered.size();
    for (const auto& q : queues)
      if (!placed.count(q.name) && (q.parent.empty() || placed.count(q.parent))) {
        ordered.push_back(q);
        placed.insert(q.name);
      }
    if (ordered.size() == before) {
      for (const auto& q : queues)
        if (!placed.count(q.name))
          fail("queues." + q.name + ".parent '" + q.parent + "' is not a queue, or the queues' parents form a cycle");
    }
  }
  for (const auto& parent : ordered) {
    double gpus = 0;
    uint64_t memory = 0;
    for (const auto& c : ordered)
      if (c.parent == parent.name) gpus += c.guarantee.gpus.value_or(0), memory += c.guarantee.memory.value_or(0);
    if (gpus > parent.guarantee.gpus.value_or(0) + 1e-9 && gpus > 0)
      fail("queues." + parent.name + ": its children are guaranteed " + formatNumber(gpus) + " GPUs, more than its own " +
           formatNumber(parent.guarantee.gpus.value_or(0)));
    if (memory > parent.guarantee.memory.value_or(0) && memory > 0)
      fail("queues." + parent.name + ": its children are guaranteed more memory than it is");
  }
  std::map<std::string, std::string> listed;  // member -> queue
  for (const auto& q : ordered)
    for (const auto& m : q.members)
      if (auto [it, fresh] = listed.emplace(m, q.name); !fresh)
        fail("'" + m + "' is a member of both queues." + it->second + " and queues." + q.name);
  queues = std::move(ordered);
}

// [settings]: timeouts, the default priority class, retention, the grace before preemption.
void readSettings(const toml::table& s, Policy& p) {
  checkKeys(s, {"lease_ttl", "server_timeout", "token_ttl", "default_priority", "ended_lease_retention", "preemption_grace"},
            "[settings]");
  if (auto n = s.get("preemption_grace")) p.preemption_grace = duration(*n, "settings.preemption_grace");
  if (auto n = s.get("lease_ttl")) p.lease_ttl = duration(*n, "settings.lease_ttl");
  if (auto n = s.get("server_timeout")) p.server_timeout = duration(*n, "settings.server_timeout");
  if (auto n = s.get("token_ttl")) p.token_ttl = duration(*n, "settings.token_ttl");
  if (auto n = s.get("ended_lease_retention")) p.ended_lease_retention = duration(*n, "settings.ended_lease_retention");
  if (auto n = s.get("default_priority")) p.default_priority = text(*n, "settings.default_priority");
  if (p.lease_ttl < std::chrono::milliseconds(200)) fail("settings.lease_ttl must be at least 200ms");
  if (p.server_timeout < std::chrono::milliseconds(200)) fail("settings.server_timeout must be at least 200ms");
  if (p.token_ttl < std::chrono::seconds(1)) fail("settings.token_ttl must be at least 1s");
}

// [priorities]: class name → integer priority; at least one.
void readPriorities(const toml::table& pr, Policy& p) {
  p.priorities.clear();
  for (const auto& [k, v] : pr) {
    double x = number(v, "priorities." + std::string(k.str()));
    if (x != std::floor(x) || std::abs(x) > 1e6) fail("priorities." + std::string(k.str()) + " must be an integer");
    p.priorities[std::string(k.str())] = static_cast<int>(x);
  }
  if (p.priorities.empty()) fail("[priorities] must name at least one class");
}

// A pool's servers, fractions and isolation (`notes`: what the policy's reader should know of them).
void readPoolShares(const toml::table& t, const std::string& where, Pool& pool, std::vector<std::string>& notes) {
  if (auto s = t.get("servers")) {
    const toml::array* a = s->as_array();
    if (!a || a->empty()) fail(where + ".servers must be a non-empty list of server names (or [\"*\"])");
    pool.servers.clear();
    for (const auto& e : *a) pool.servers.push_back(text(e, where + ".servers[]"));
  }
  if (auto f = t.get("fractions")) {
    const toml::array* a = f->as_array();
    if (!a || a->empty()) fail(where + ".fractions must be a non-empty list such as [1.0, 0.5, 0.25]");
    pool.fractions.clear();
    for (const auto& e : *a) {
      double x = number(e, where + ".fractions[]");
      if (!(x > 0 && x <= 1)) fail(where + ".fractions: " + formatNumber(x) + " is not in (0, 1]");
      pool.fractions.push_back(x);
    }
  }
  if (auto i = t.get("isolation"))
    pool.isolation = oneOf(*i, where + ".isolation", {Isolation::kExclusive, Isolation::kProcess, Isolation::kSpatial}, isolationName);
  if (pool.isolation == Isolation::kSpatial)
    notes.push_back(where + ".isolation = \"spatial\": SM partitions are not built yet; this pool's leases below a "
                    "whole GPU are paced as with \"process\" (docs/admin.md, \"Compute\")");
  if (pool.isolation == Isolation::kExclusive && (pool.fractions.size() != 1 || pool.fractions[0] != 1.0))
    fail(where + ": an exclusive pool offers whole GPUs only (fractions = [1.0])");
  if (auto pl = t.get("placement"))
    pool.placement = oneOf(*pl, where + ".placement", {Placement::kPack, Placement::kSpread}, placementName);
  if (auto h = t.get("heterogeneity"))
    pool.heterogeneity = oneOf(*h, where + ".heterogeneity", {Heterogeneity::kAware, Heterogeneity::kAgnostic}, heterogeneityName);
}

// A pool's order and rounds, moves between GPU types, elastic fractions, time limits.
void readPoolSchedule(const toml::table& t, const std::string& where, Pool& pool) {
  if (auto o = t.get("order"))
    pool.order = oneOf(*o, where + ".order", {Order::kFifo, Order::kShortestFirst, Order::kLeastAttained, Order::kMaxMin}, orderName);
  if (pool.order == Order::kMaxMin) pool.round = std::chrono::minutes(6);  // Gavel's round
  if (auto r = t.get("round")) {
    pool.round = duration(*r, where + ".round");
    if (pool.round != std::chrono::milliseconds(0) && pool.round < std::chrono::seconds(10))
      fail(where + ".round must be 0 (no rounds) or at least 10s: each round may restart jobs");
    if (pool.round == std::chrono::milliseconds(0) && pool.order == Order::kMaxMin)
      fail(where + ": order \"max-min\" divides time in rounds; round must not be 0");
  }
  if (auto st = t.get("round_stay")) {
    pool.round_stay = number(*st, where + ".round_stay");
    if (!(pool.round_stay >= 1 && pool.round_stay <= 100)) fail(where + ".round_stay must be in [1, 100] (1: no preference for running jobs)");
  }
  if (auto m = t.get("moves_per_hour")) {
    double x = number(*m, where + ".moves_per_hour");
    if (x != std::floor(x) || x < 0 || x > 1e6) fail(where + ".moves_per_hour must be a whole number >= 0");
    pool.moves_per_hour = static_cast<int>(x);
  }
  if (auto e = t.get("elastic_after")) {
    if (e->value<std::string>() == "never") pool.elastic_after.reset();
    else pool.elastic_after = duration(*e, where + ".elastic_after");
  }
  if (auto mt = t.get("max_time")) pool.max_time = duration(*mt, where + ".max_time");
  if (auto it = t.get("idle_timeout")) {
    pool.idle_timeout = duration(*it, where + ".idle_timeout");
    if (pool.idle_timeout.count() != 0 && pool.idle_timeout < std::chrono::seconds(1))
      fail(where + ".idle_timeout must be 0 (never) or at least 1s (servers report kernels with their heartbeats)");
  }
}

// [pools]: at least one; no server named by two of them.
void readPools(const toml::table& pools, Policy& p) {
  p.pools.clear();
  for (const auto& [k, v] : pools) {
    std::string where = "pools." + std::string(k.str());
    const toml::table* t = v.as_table();
    if (!t) fail(where + " must be a table");
    checkKeys(*t, {"servers", "fractions", "isolation", "placement", "heterogeneity", "moves_per_hour", "order", "round", "round_stay", "elastic_after", "max_time", "idle_timeout"},
              where);
    Pool pool;
    pool.name = std::string(k.str());
    readPoolShares(*t, where, pool, p.notes);
    readPoolSchedule(*t, where, pool);
    p.pools.push_back(std::move(pool));
  }
  if (p.pools.empty()) fail("[pools] must define at least one pool");
}

void readQuotas(const toml::table& q, Policy& p) {
  checkKeys(q, {"users", "groups"}, "[quotas]");
  for (auto [kind, map] : {std::pair{"users", &p.user_quotas}, std::pair{"groups", &p.group_quotas}}) {
    if (auto t = q[kind].as_table())
      for (const auto& [k, v] : *t) (*map)[std::string(k.str())] = quota(v, "quotas." + std::string(kind) + "." + std::string(k.str()));
  }
}

}  // namespace

Policy parsePolicy(const std::string& toml_text) {
  toml::table root;
  try {
    root = toml::parse(toml_text);
  } catch (const toml::parse_error& e) {
    std::ostringstream o;
    o << "TOML syntax error at line " << e.source().begin.line << ", column " << e.source().begin.column << ": "
      << e.description();
    fail(o.str());
  }
  checkKeys(root, {"settings", "priorities", "pools", "quotas", "queues", "gpu_types", "job_kinds", "access"}, "the policy");
  Policy p;
  p.source = toml_text;
  if (auto s = root["settings"].as_table()) readSettings(*s, p);
  if (auto pr = root["priorities"].as_table()) readPriorities(*pr, p);
  if (!p.priorities.count(p.default_priority))
    fail("settings.default_priority '" + p.default_priority + "' is not one of the [priorities] classes");
  if (auto pools = root["pools"].as_table()) readPools(*pools, p);
  std::set<std::string> named;
  for (const auto& pool : p.pools)
    for (const auto& s : pool.servers)
      if (s != "*" && !named.insert(s).second) fail("server '" + s + "' is named by more than one pool");
  if (auto q = root["quotas"].as_table()) readQuotas(*q, p);
  if (auto qs = root["queues"].as_table()) {
    for (const auto& [k, v] : *qs) p.queues.push_back(queue(std::string(k.str()), v));
    orderQueues(p.queues);
  }
  if (auto t = root["gpu_types"].as_table()) p.gpu_types = gpuTypes(*t);
  if (auto t = root["job_kinds"].as_table()) p.job_kinds = jobKinds(*t);
  if (auto a = root["access"].as_table()) p.access = access(*a, p);
  return p;
}

}  // namespace gpool::allocator

namespace gpool::allocator {

std::string withQueue(const std::string& source, const std::string& name, const std::string* changes) {
  toml::table root, change;
  try {
    root = toml::parse(source);
    if (changes) change = toml::parse(*changes);
  } catch (const toml::parse_error& e) {
    fail(std::string(changes ? "the queue's settings" : "the policy") + " are not TOML: " + std::string(e.description()));
  }
  if (!root["queues"].as_table()) root.insert_or_assign("queues", toml::table{});
  toml::table& queues = *root["queues"].as_table();
  if (!changes) {
    if (!queues.contains(name)) fail("there is no queue '" + name + "'");
    queues.erase(name);
  } else {
    if (!queues[name].as_table()) queues.insert_or_assign(name, toml::table{});
    toml::table& q = *queues[name].as_table();
    for (const auto& [k, v] : change) q.insert_or_assign(k, v);
  }
  std::ostringstream out;
  out << root;
  return out.str();
}

}  // namespace gpool::allocator
