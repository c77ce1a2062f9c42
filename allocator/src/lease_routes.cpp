// Leases: requested by a user the allocator knows (identity.h); read, heartbeated and released by their
// owner (the lease key it got, or its user) or an admin. Others see a lease without its tokens.
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <optional>

#include "api_answers.h"
#include "gpool/allocator/lease_token.h"
#include "gpool/printable.h"
#include "model_json.h"
#include "service.h"

namespace gpool::allocator {

using nlohmann::json;

// What a lease request may carry as its request_key: a client's random name for it, sent again with a
// retry (after a lost answer, a failover), so that the retry gets the same lease.
bool Service::validRequestKey(const json& j, std::string& out) {
  if (!j.is_string()) return false;
  out = j.get<std::string>();
  return out.size() >= 16 && out.size() <= 128 &&
         std::all_of(out.begin(), out.end(), [](unsigned char ch) { return std::isalnum(ch) || ch == '-' || ch == '_'; });
}

// The answer to a request sent again: the lease it made, as it is now (201 granted, else 202), with the
// same lease key. Only the user who sent it, with its request_key (which the lease key derives from).
void Service::replyAgain(httplib::Response& res, const Lease& l, const std::string& user, const std::string& lease_key) {
  if (l.req.user != user || !token::sameText(l.owner_key_hash, token::sha256Hex(lease_key)))
    return error(res, 409, "this request_key names another request: make a new one for each request");
  json out = toJson(l, LeaseView::kOwner);
  out["lease_key"] = lease_key;
  out["heartbeat_ms"] = sched_->policy().leaseHeartbeat().count();
  if (l.state == LeaseState::kQueued) out["position"] = sched_->position(l.id);
  reply(res, l.state == LeaseState::kGranted ? 201 : 202, out);
}

// Whom the request is for and what it may use: its user (another's only for an admin), a group of the
// caller's, a priority class the policy lets the caller use. Otherwise answers 403 (mu_ held).
bool Service::mayRequest(const Caller& c, LeaseRequest& r, httplib::Response& res) {
  bool admin = isAdmin(c);
  if (r.user.empty()) r.user = c.who.user;
  if (r.user != c.who.user && !admin)
    return error(res, 403, "you are '" + c.who.user + "': only an admin requests leases for another user"), false;
  if (r.group.empty() && r.user == c.who.user) r.group = c.who.group;
  else if (!admin && !c.who.inGroup(r.group))
    return error(res, 403, "user '" + c.who.user + "' is not in group '" + r.group + "'"), false;
  if (r.user == c.who.user) r.member_of = c.who.groups;  // every group's quota applies
  std::string cls = r.priority.empty() ? sched_->policy().default_priority : r.priority;
  if (!admin && !sched_->policy().access.mayUsePriority(cls, c.who.user, c.who.groups))
    return error(res, 403, "user '" + c.who.user + "' may not use priority class '" + cls + "' (the policy's access.priorities)"), false;
  return true;
}

void Service::requestLease(const httplib::Request& req, httplib::Response& res) {
  auto t0 = std::chrono::steady_clock::now();
  json j;
  if (!parseBody(req, res, j)) return;
  LeaseRequest r;
  try {
    r = requestFromJson(j);
  } catch (const std::exception& e) {
    return error(res, 400, std::string("bad lease request: ") + e.what());
  }
  std::string request_key;
  if (j.contains("request_key") && !validRequestKey(j["request_key"], request_key))
    return error(res, 400, "request_key must be 16 to 128 characters of A-Z, a-z, 0-9, - and _");
  Caller c = identify(req);
  if (c.outcome == Authenticator::Outcome::kRefused) return error(res, 401, c.why);
  if (c.outcome == Authenticator::Outcome::kAnonymous)
    return error(res, 401, std::string("who is asking? ") + Authenticator::kHowToIdentify);
  std::lock_guard lock(mu_);
  if (!mayRequest(c, r, res)) return;
  std::string id = newLeaseId(), lease_key = "gplk1." + token::randomHex(32);
  if (!request_key.empty()) {  // the same request again (its answer was lost): the same lease
    id = "L" + token::sha256Hex(r.user + "\n" + request_key).substr(0, 24);
    lease_key = "gplk1." + token::sha256Hex("gpool lease key\n" + request_key);
    if (const Lease* l = sched_->lease(id)) return replyAgain(res, *l, r.user, lease_key);
  }
  ++requests_;
  Decision d = sched_->request(r, now(), id, token::sha256Hex(lease_key));
  persist();
  recordDecision(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (d.kind == Decision::kRefused) {
    ++refusals_;
    return reply(res, d.lease ? 409 : 422, {{"error", d.reason}, {"refused", true}});
  }
  json out = toJson(*d.lease, LeaseView::kOwner);
  out["lease_key"] = lease_key;  // shown this once: it reads, heartbeats and releases the lease
  out["heartbeat_ms"] = sched_->policy().leaseHeartbeat().count();
  if (d.kind == Decision::kQueued) {
    ++queued_;
    out["position"] = sched_->position(id);
    return reply(res, 202, out);
  }
  ++grants_;
  spdlog::info("lease {} granted to {} ({}): {} x {} GPU", id, gpool::printable(r.user), viaName(c.who.via), r.n, r.p);
  reply(res, 201, out);
}

// Long poll: answers when the lease changes or after wait_ms (at most 5000). The owner's polls keep a
// queued request alive; a granted lease needs its explicit heartbeats.
void Service::watchLease(const httplib::Request& req, httplib::Response& res) {
  std::string id = req.matches[1];
  int64_t wait_ms = 0;
  if (req.has_param("wait_ms")) {
    try {
      wait_ms = std::clamp<int64_t>(std::stoll(req.get_param_value("wait_ms")), 0, 5000);
    } catch (...) {
      return error(res, 400, "wait_ms must be a number of milliseconds");
    }
  }
  Caller c = identify(req);
  if (c.outcome == Authenticator::Outcome::kRefused) return error(res, 401, c.why);
  std::unique_lock lock(mu_);
  const Lease* l = sched_->lease(id);
  if (!l) return error(res, 404, "no lease " + id + " (ended more than a minute ago, or never existed)");
  bool owner = mayActFor(req, c, *l);
  if (owner && l->state == LeaseState::kQueued) sched_->heartbeatLease(id, now());
  LeaseState was = l->state;
  std::string reason = l->wait_reason;
  int pos = sched_->position(id);
  int64_t notice = l->preempt_at_ms;
  changed_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] {
    const Lease* x = sched_->lease(id);
    return stopping_ || !x || x->state != was || sched_->position(id) != pos || x->wait_reason != reason ||
           x->preempt_at_ms != notice;
  });
  l = sched_->lease(id);
  if (!l) return error(res, 404, "no lease " + id);
  if (owner && l->state == LeaseState::kQueued) sched_->heartbeatLease(id, now());
  json out = toJson(*l, owner ? LeaseView::kOwner : LeaseView::kPublic);
  out["heartbeat_ms"] = sched_->policy().leaseHeartbeat().count();
  if (l->state == LeaseState::kQueued) out["position"] = sched_->position(id);
  if (l->state == LeaseState::kGranted) out = withTimes(std::move(out), *l);
  else if (l->preempt_at_ms) out["preempt_in_ms"] = std::max<int64_t>(0, l->preempt_at_ms - now());
  reply(res, 200, out);
}

// The lease `id` when the caller may act for it; otherwise replies 401, 403 or 404 (mu_ held).
const Lease* Service::ownedLease(const httplib::Request& req, httplib::Response& res, const Caller& c) {
  std::string id = req.matches[1];
  if (c.outcome == Authenticator::Outcome::kRefused) return error(res, 401, c.why), nullptr;
  const Lease* l = sched_->lease(id);
  if (!l) return error(res, 404, "no lease " + id), nullptr;
  if (mayActFor(req, c, *l)) return l;
  if (c.outcome == Authenticator::Outcome::kAnonymous)
    return error(res, 401, "only the owner of lease " + id + " (its lease key, or its user) or an admin may do this"), nullptr;
  return error(res, 403, "lease " + id + " is not yours ('" + c.who.user + "'): only its owner or an admin may do this"), nullptr;
}

// A heartbeat may carry the job's progress (`progress`: a count in its kind's unit, GPOOL_PROGRESS_FILE).
void Service::leaseHeartbeat(const httplib::Request& req, httplib::Response& res) {
  json body;
  if (!parseBody(req, res, body)) return;
  std::optional<double> progress;
  if (body.contains("progress")) {
    const json& p = body["progress"];
    if (!p.is_number() || !std::isfinite(p.get<double>()) || p.get<double>() < 0 || p.get<double>() > 1e15)
      return error(res, 400, "progress must be a number from 0 to 1e15 (how far the job got, in its kind's unit)");
    progress = p.get<double>();
  }
  Caller c = identify(req);
  std::lock_guard lock(mu_);
  const Lease* l = ownedLease(req, res, c);
  if (!l) return;
  if (!sched_->heartbeatLease(l->id, now()))
    return reply(res, 410, {{"error", "lease " + l->id + " has ended: " + l->end_reason}, {"state", "ended"}});
  if (progress) sched_->reportProgress(l->id, *progress, now());
  if (sched_->renewTokens(l->id)) persist();
  json out = {{"state", stateName(l->state)}};
  if (l->state == LeaseState::kGranted) {  // the holder's (as GET shows the owner): its command's later processes use them
    json owner = toJson(*l, LeaseView::kOwner);
    out.update({{"shares", owner["shares"]}, {"token_expiry", owner["token_expiry"]}});
  }
  if (l->preempt_at_ms)  // notice: the launcher tells the program, which has this long to stop
    out.update({{"preempt_in_ms", std::max<int64_t>(0, l->preempt_at_ms - now())}, {"preempted_for", l->preempted_for},
                {"notice", noticeName(l->notice)}});
  reply(res, 200, out);
}

void Service::releaseLease(const httplib::Request& req, httplib::Response& res) {
  Caller c = identify(req);
  std::lock_guard lock(mu_);
  const Lease* l = ownedLease(req, res, c);
  if (!l) return;
  std::string id = l->id;
  json answer = {{"id", id}, {"state", "ended"}};
  if (!l->use_on.empty()) answer["use"] = useJson(*l);  // what it used, for its holder's last word
  answer["ended"] = sched_->end(id, l->state == LeaseState::kQueued ? "cancelled while queued" : "released", now());
  persist();
  reply(res, 200, answer);
}

void Service::whoami(const httplib::Request& req, httplib::Response& res) {
  Caller c = identify(req);
  if (c.outcome == Authenticator::Outcome::kRefused) return error(res, 401, c.why);
  if (c.outcome == Authenticator::Outcome::kAnonymous) return error(res, 401, std::string("no identity: ") + Authenticator::kHowToIdentify);
  std::lock_guard lock(mu_);
  reply(res, 200, identityJson(c.who, isAdmin(c)));
}

}  // namespace gpool::allocator
