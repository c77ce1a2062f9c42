#include "model_json.h"

#include "gpool/allocator/lease_token.h"
#include "gpool/printable.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace gpool::allocator {

using nlohmann::json;

namespace {

// An integer field of a record, refused (std::invalid_argument) unless it is an integer JSON number that
// fits T: converting 1e114 to an int is undefined behaviour, not an error (found by fuzz_allocator_json).
template <typename T>
T integer(const json& v) {
  bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
              : v.is_number_integer() ? v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                            (v.get<int64_t>() < 0 || static_cast<uint64_t>(v.get<int64_t>()) <=
                                                                         static_cast<uint64_t>(std::numeric_limits<T>::max()))
                                      : false;
  if (!fits) throw std::invalid_argument("an integer field is not an integer of its range");
  return v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>()) : static_cast<T>(v.get<int64_t>());
}

}  // namespace

json toJson(const Server& s) {
  json gpus = json::array();
  for (const auto& g : s.gpus)
    gpus.push_back({{"index", g.index}, {"uuid", g.uuid}, {"model", g.model}, {"type", g.type}, {"memory", g.memory}, {"sms", g.sms},
                    {"used_fraction", g.used_fraction}, {"used_memory", g.used_memory}});
  return {{"name", s.name}, {"address", s.address}, {"up", s.up}, {"drain", s.drain}, {"gpus", gpus}};
}

Server serverFromJson(const json& j) {
  Server s;
  s.name = j.at("name").get<std::string>();
  s.address = j.at("address").get<std::string>();
  s.up = j.value("up", true);
  s.drain = j.value("drain", false);
  for (const auto& g : j.at("gpus")) {
    Gpu x;
    if (!g.at("index").is_number_unsigned() || !g.at("memory").is_number_unsigned() ||
        (g.contains("sms") && !g.at("sms").is_number_unsigned()))
      throw std::invalid_argument("a GPU's index, memory and sms must be non-negative integers");
    x.index = g.at("index").get<int>();
    x.uuid = g.value("uuid", "");
    x.model = g.value("model", "");
    x.memory = g.at("memory").get<uint64_t>();
    x.sms = g.value("sms", 0);
    s.gpus.push_back(std::move(x));
  }
  return s;
}

json toJson(const LeaseRequest& r) {
  return {{"n", r.n}, {"p", r.p}, {"m", r.m}, {"user", r.user}, {"group", r.group}, {"pool", r.pool},
          {"priority", r.priority}, {"wait_ms", r.wait_ms}, {"member_of", r.member_of}, {"preemptible", r.preemptible},
          {"min_p", r.min_p}, {"gpu_types", r.gpu_types}, {"kind", r.kind},
          {"restartable", r.restartable}, {"job", r.job}, {"estimate_s", r.estimate_s}, {"time_limit_ms", r.time_limit_ms},
          {"ends_with_clients", r.ends_with_clients}};
}

json toJson(const Lease& l, LeaseView view) {
  json shares = json::array();
  for (const auto& s : l.shares) {
    json j = {{"server", s.server}, {"address", s.address}, {"device", s.device}, {"uuid", s.uuid},
              {"fraction", s.fraction}, {"memory", s.memory}};
    if (view != LeaseView::kPublic) j["token"] = s.token;
    shares.push_back(j);
  }
  json j = {{"id", l.id}, {"state", stateName(l.state)}, {"request", toJson(l.req)}, {"priority", l.priority},
            {"seq", l.seq}, {"created_ms", l.created_ms}, {"granted_ms", l.granted_ms}, {"ended_ms", l.ended_ms},
            {"token_expiry", l.token_expiry_s}, {"ended_unix_s", l.ended_unix_s},
            {"granted_unix_s", l.granted_unix_s}, {"shares", shares}};
  if (!l.end_reason.empty()) j["end_reason"] = l.end_reason;
  if (!l.wait_reason.empty()) j["waiting_for"] = l.wait_reason;
  if (l.preempt_at_ms) {  // notice: the share is revoked at preempt_at_ms (the allocator's clock), for preempted_for
    j["preempt_at_ms"] = l.preempt_at_ms;
    j["preempted_for"] = l.preempted_for;
    j["notice"] = noticeName(l.notice);
  }
  if (view == LeaseView::kRecord) j["owner_key_hash"] = l.owner_key_hash;
  return j;
}

Lease leaseFromJson(const json& j) {
  Lease l;
  l.id = j.at("id").get<std::string>();
  std::string st = j.at("state").get<std::string>();
  l.state = st == "granted" ? LeaseState::kGranted : st == "queued" ? LeaseState::kQueued : LeaseState::kEnded;
  const json& r = j.at("request");
  l.req.n = integer<int>(r.at("n"));
  l.req.p = r.at("p").get<double>();
  l.req.m = integer<uint64_t>(r.at("m"));
  l.req.user = r.at("user").get<std::string>();
  l.req.group = r.at("group").get<std::string>();
  l.req.pool = r.at("pool").get<std::string>();
  l.req.priority = r.at("priority").get<std::string>();
  l.req.wait_ms = integer<int64_t>(r.at("wait_ms"));
  l.req.member_of = r.value("member_of", std::vector<std::string>{});
  l.req.preemptible = r.value("preemptible", true);
  l.req.min_p = r.value("min_p", 0.0);
  l.req.gpu_types = r.value("gpu_types", std::vector<std::string>{});
  l.req.kind = r.value("kind", std::string());
  l.req.restartable = r.value("restartable", false);
  l.req.job = r.value("job", std::string());
  l.req.estimate_s = r.value("estimate_s", 0.0);
  l.req.time_limit_ms = r.contains("time_limit_ms") ? integer<int64_t>(r.at("time_limit_ms")) : 0;
  l.req.ends_with_clients = r.value("ends_with_clients", true);
  l.preempt_at_ms = j.contains("preempt_at_ms") ? integer<int64_t>(j.at("preempt_at_ms")) : 0;
  l.preempted_for = j.value("preempted_for", "");
  l.notice = noticeFromName(j.value("notice", ""));
  if (l.preempt_at_ms && l.notice == Notice::kNone)  // a record from before `notice` was kept: its text says
    l.notice = l.preempted_for.rfind(kMovePrefix, 0) == 0    ? Notice::kMove
               : l.preempted_for.rfind(kRoundPrefix, 0) == 0 ? Notice::kRound
                                                             : Notice::kPreemption;
  l.priority = integer<int>(j.at("priority"));
  l.seq = integer<uint64_t>(j.at("seq"));
  l.created_ms = integer<int64_t>(j.at("created_ms"));
  l.granted_ms = integer<int64_t>(j.at("granted_ms"));
  l.ended_ms = integer<int64_t>(j.at("ended_ms"));
  l.token_expiry_s = integer<int64_t>(j.at("token_expiry"));
  l.ended_unix_s = j.contains("ended_unix_s") ? integer<int64_t>(j.at("ended_unix_s")) : 0;
  l.granted_unix_s = j.contains("granted_unix_s") ? integer<int64_t>(j.at("granted_unix_s")) : 0;
  l.end_reason = j.value("end_reason", "");
  l.wait_reason = j.value("waiting_for", "");
  l.owner_key_hash = j.value("owner_key_hash", "");
  for (const auto& s : j.at("shares"))
    l.shares.push_back(Share{s.at("server").get<std::string>(), s.at("address").get<std::string>(),
                             s.value("uuid", ""), s.value("token", ""), integer<int>(s.at("device")),
                             s.at("fraction").get<double>(), integer<uint64_t>(s.at("memory"))});
  return l;
}

namespace {

// The request's field `name`, or nullptr.
const json* field(const json& j, const char* name) { return j.contains(name) ? &j.at(name) : nullptr; }

void checkRequestFields(const json& j) {
  for (const auto& [k, v] : j.items()) {
    (void)v;
    if (k != "n" && k != "p" && k != "m" && k != "user" && k != "group" && k != "pool" && k != "priority" && k != "wait" &&
        k != "preemptible" && k != "min_p" && k != "gpu_types" && k != "kind" && k != "restartable" && k != "job" &&
        k != "estimate_s" && k != "request_key" && k != "ends_with_clients" && k != "time_limit")
      throw std::invalid_argument("unknown field '" + k + "' (fields: n, p, m, user, group, pool, priority, wait, preemptible, "
                                  "min_p, gpu_types, kind, restartable, job, estimate_s, request_key, ends_with_clients, time_limit)");
  }
}

// How many GPUs, which fraction of each (elastic: down to min_p), how much memory.
void readShape(const json& j, LeaseRequest& r) {
  if (auto n = field(j, "n")) {
    if (!n->is_number_integer() || n->get<int64_t>() < 1 || n->get<int64_t>() > token::kMaxShares)
      throw std::invalid_argument("n must be an integer from 1 to " + std::to_string(token::kMaxShares));
    r.n = n->get<int>();
  }
  if (auto p = field(j, "p")) {
    if (!p->is_number() || !(p->get<double>() > 0 && p->get<double>() <= 1))
      throw std::invalid_argument("p must be a number in (0, 1]");
    r.p = p->get<double>();
  }
  if (auto mp = field(j, "min_p")) {  // elastic: any offered fraction from min_p to p
    if (!mp->is_number() || !(mp->get<double>() > 0 && mp->get<double>() <= r.p))
      throw std::invalid_argument("min_p must be a number in (0, p]");
    r.min_p = mp->get<double>();
  }
  if (auto m = field(j, "m")) {
    if (m->is_number_unsigned()) r.m = m->get<uint64_t>();
    else if (m->is_string()) r.m = parseSize(m->get<std::string>());
    else throw std::invalid_argument("m must be a number of bytes or a size such as \"16GiB\"");
  }
}

// Who it is for and what it is: user, group, pool, priority class, job kind, job (printable text each).
void readNames(const json& j, LeaseRequest& r) {
  for (auto [name, out] : {std::pair{"user", &r.user}, std::pair{"group", &r.group}, std::pair{"pool", &r.pool},
                           std::pair{"priority", &r.priority}, std::pair{"kind", &r.kind},
                           std::pair{"job", &r.job}}) {
    if (auto v = field(j, name)) {
      if (!v->is_string()) throw std::invalid_argument(std::string(name) + " must be a string");
      *out = v->get<std::string>();
      if (!gpool::isPrintable(*out)) throw std::invalid_argument(std::string(name) + " must be printable ASCII, without control characters");
    }
  }
}

// Where it may run and what may be done to it: GPU types, preemption, its estimate, restarts.
void readPlacement(const json& j, LeaseRequest& r) {
  if (auto t = field(j, "gpu_types")) {  // the GPU types it may run on (any of them)
    auto plain = [](const json& x) { return x.is_string() && gpool::isPlainName(x.get_ref<const std::string&>()); };
    if (!t->is_array() || t->size() > 16 || !std::all_of(t->begin(), t->end(), plain))
      throw std::invalid_argument("gpu_types must be a list of at most 16 GPU type names (letters, digits, '.', '_', '-')");
    r.gpu_types = t->get<std::vector<std::string>>();
  }
  if (auto pr = field(j, "preemptible")) {
    if (!pr->is_boolean()) throw std::invalid_argument("preemptible must be true or false");
    r.preemptible = pr->get<bool>();
  }
  if (auto e = field(j, "estimate_s")) {  // shortest-first pools
    if (!e->is_number() || !(e->get<double>() >= 0 && e->get<double>() <= 1e9))
      throw std::invalid_argument("estimate_s must be seconds, from 0 to 1e9");
    r.estimate_s = e->get<double>();
  }
  for (auto [name, out] : {std::pair{"restartable", &r.restartable}, std::pair{"ends_with_clients", &r.ends_with_clients}}) {
    if (auto v = field(j, name)) {
      if (!v->is_boolean()) throw std::invalid_argument(std::string(name) + " must be true or false");
      *out = v->get<bool>();
    }
  }
}

// Its time limit, and how long it may wait in the queue.
void readTimes(const json& j, LeaseRequest& r) {
  if (auto t = field(j, "time_limit")) {  // seconds, or a duration such as "2h"
    if (t->is_number()) {
      double s = t->get<double>();
      if (!(s > 0 && s <= 30 * 86400.0)) throw std::invalid_argument("time_limit must be more than 0 s and at most 30 days");
      r.time_limit_ms = std::max<int64_t>(1, static_cast<int64_t>(std::llround(s * 1000)));
    } else if (t->is_string()) {
      r.time_limit_ms = parseDuration(t->get<std::string>()).count();
      if (r.time_limit_ms <= 0) throw std::invalid_argument("time_limit must be more than 0 s");
    } else {
      throw std::invalid_argument("time_limit must be seconds or a duration such as \"2h\"");
    }
  }
  if (auto w = field(j, "wait")) {
    if (w->is_number()) {
      double s = w->get<double>();
      if (s > 30 * 86400.0) throw std::invalid_argument("wait is longer than 30 days");
      r.wait_ms = s < 0 ? -1 : static_cast<int64_t>(std::llround(s * 1000));
    } else if (w->is_string()) {
      r.wait_ms = parseDuration(w->get<std::string>()).count();
    } else {
      throw std::invalid_argument("wait must be seconds, a duration such as \"5m\", or -1 (for ever)");
    }
  }
}

}  // namespace

LeaseRequest requestFromJson(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("the request body must be a JSON object");
  checkRequestFields(j);
  LeaseRequest r;
  readShape(j, r);
  readNames(j, r);
  readPlacement(j, r);
  readTimes(j, r);
  return r;
}

json toJson(const ServiceAccount& a) {
  return {{"name", a.name}, {"groups", a.groups}, {"key_hash", a.key_hash}, {"created_unix_s", a.created_unix_s}};
}

ServiceAccount serviceAccountFromJson(const json& j) {
  return {j.at("name").get<std::string>(), j.at("groups").get<std::vector<std::string>>(), j.at("key_hash").get<std::string>(),
          j.contains("created_unix_s") ? integer<int64_t>(j.at("created_unix_s")) : int64_t{0}};
}

}  // namespace gpool::allocator
