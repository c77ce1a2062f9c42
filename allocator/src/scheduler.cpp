// Grant decisions (see scheduler.h). A request is refused at once when it can never fit (its pool, its
// fraction, its size, its quota); otherwise it is granted when GPUs with room exist, else queued by
// priority class and arrival. Within a pool the queue is strict: a request that waits for capacity holds
// back the ones behind it, so large requests are not starved; one held back by its owner's quota does not.
#include "scheduler.h"
#include "gpu_fit.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>

namespace gpool::allocator {
namespace {

constexpr double kEps = 1e-9;

}  // namespace

const char* stateName(LeaseState s) {
  switch (s) {
    case LeaseState::kQueued: return "queued";
    case LeaseState::kGranted: return "granted";
    default: return "ended";
  }
}

Scheduler::Scheduler(Policy policy, Signer signer, std::function<int64_t()> unix_seconds)
    : policy_(std::move(policy)), sign_(std::move(signer)), unix_seconds_(std::move(unix_seconds)) {
  fair_.reset(policy_.queues);
}

int Scheduler::priorityOf(const std::string& cls) const {
  auto it = policy_.priorities.find(cls.empty() ? policy_.default_priority : cls);
  return it == policy_.priorities.end() ? 0 : it->second;
}

// A pool, priority class or fraction the policy does not have, or a time limit past the pool's.
std::optional<std::string> Scheduler::notInPolicy(const LeaseRequest& r) const {
  const Pool* pool = policy_.pool(r.pool);
  if (!pool) {
    std::string names;
    for (const auto& p : policy_.pools) names += (names.empty() ? "" : ", ") + p.name;
    return "there is no pool named '" + r.pool + "' (pools: " + names + ")";
  }
  if (!r.priority.empty() && !policy_.priorities.count(r.priority)) {
    std::string names;
    for (const auto& [k, v] : policy_.priorities) names += (names.empty() ? "" : ", ") + k;
    return "there is no priority class '" + r.priority + "' (classes: " + names + ")";
  }
  bool offered = std::any_of(pool->fractions.begin(), pool->fractions.end(), [&](double f) { return std::abs(f - r.p) < kEps; });
  if (!offered) {
    std::string fr;
    for (double f : pool->fractions) fr += (fr.empty() ? "" : ", ") + formatNumber(f);
    return "pool '" + pool->name + "' offers fractions " + fr + " of a GPU, not " + formatNumber(r.p);
  }
  return exceedsMaxTime(*pool, r);
}

// More GPUs, or more memory on one, than the pool has of the types the request accepts, even empty.
// `largest`: the memory of the largest GPU it may run on.
std::optional<std::string> Scheduler::beyondPool(const LeaseRequest& r, const Pool& pool, uint64_t& largest) const {
  int gpus = 0, in_pool = 0;
  std::set<std::string> types;  // of the pool's GPUs
  for (const auto& [name, s] : servers_) {
    const Pool* sp = policy_.poolOfServer(name);
    if (!sp || sp->name != pool.name) continue;
    for (const auto& g : s.gpus) {
      ++in_pool;
      types.insert(g.type);
      if (!mayRunOn(r, g)) continue;
      ++gpus;
      largest = std::max(largest, g.memory);
    }
  }
  if (in_pool == 0) return "pool '" + pool.name + "' has no GPUs (no gpool-server in it has registered)";
  if (gpus == 0) {
    std::string asked, here;
    for (const auto& t : r.gpu_types) asked += (asked.empty() ? "" : ", ") + t;
    for (const auto& t : types) here += (here.empty() ? "" : ", ") + t;
    return "pool '" + pool.name + "' has no GPU of type " + asked + " (its types: " + here + ")";
  }
  // Shares of one request may share a GPU (two halves of one GPU are two devices).
  int per_gpu = sharesOfFraction(0.0, r.p, r.n);
  if (r.n > gpus * per_gpu)
    return "asks for " + std::to_string(r.n) + " GPUs; pool '" + pool.name + "' has " + std::to_string(gpus) +
           (r.gpu_types.empty() ? "" : " of the types it accepts") +
           (per_gpu > 1 ? " (" + std::to_string(gpus * per_gpu) + " shares of " + formatNumber(r.p) + ")" : "");
  if (r.m > largest)
    return "asks for " + formatSize(r.m) + " per GPU; the largest GPU in pool '" + pool.name + "' has " + formatSize(largest);
  return std::nullopt;
}

// More than the quota of its user, or of a group charged for it, even with nothing else held.
std::optional<std::string> Scheduler::beyondQuota(const LeaseRequest& r, uint64_t largest) const {
  const double least = r.min_p > 0 ? r.min_p : r.p;  // an elastic request may take less than p
  double gpu_total = r.n * least;
  // Without m, each share takes its fraction of its GPU's memory: count the largest GPU's (the most it can be).
  uint64_t mem_total = (r.m ? r.m : static_cast<uint64_t>(least * static_cast<double>(largest))) * static_cast<uint64_t>(r.n);
  std::vector<std::tuple<std::string, const std::map<std::string, Quota>*, const char*>> holders{{r.user, &policy_.user_quotas, "user"}};
  for (const auto& g : r.chargedGroups()) holders.emplace_back(g, &policy_.group_quotas, "group");
  for (const auto& [who, map, kind] : holders) {
    auto q = map->find(who);
    if (q == map->end()) continue;
    if (q->second.gpus && gpu_total > *q->second.gpus + kEps)
      return std::string("over quota: ") + kind + " '" + who + "' may hold " + formatNumber(*q->second.gpus) +
             " GPUs; this asks for " + formatNumber(gpu_total);
    if (q->second.memory && mem_total > *q->second.memory)
      return std::string("over quota: ") + kind + " '" + who + "' may hold " + formatSize(*q->second.memory) +
             " of GPU memory; this asks for " + formatSize(mem_total);
  }
  return std::nullopt;
}

std::optional<std::string> Scheduler::neverFits(const LeaseRequest& r) const {
  if (auto why = notInPolicy(r)) return why;
  uint64_t largest = 0;
  if (auto why = beyondPool(r, *policy_.pool(r.pool), largest)) return why;
  return beyondQuota(r, largest);
}

uint64_t Scheduler::largestGpu(const std::string& pool) const {
  uint64_t largest = 0;
  for (const auto& [name, s] : servers_) {
    const Pool* sp = policy_.poolOfServer(name);
    if (sp && sp->name == pool)
      for (const auto& g : s.gpus) largest = std::max(largest, g.memory);
  }
  return largest;
}

std::optional<std::string> Scheduler::quotaBlocks(const Lease& l, double p) const {
  if (p <= 0) p = l.req.p;
  const double gpus_asked = l.req.n * p;
  const uint64_t asks = asksMemory(l.req, p);
  std::vector<std::tuple<std::string, const std::map<std::string, Quota>*, const char*, bool>> holders{
      {l.req.user, &policy_.user_quotas, "user", true}};
  for (const auto& g : l.req.chargedGroups()) holders.emplace_back(g, &policy_.group_quotas, "group", false);
  for (const auto& [who, map, kind, is_user] : holders) {
    auto q = map->find(who);
    if (q == map->end()) continue;
    const auto& uses = is_user ? user_use_ : group_use_;
    auto held = uses.find(who);
    double gpus = held == uses.end() ? 0 : held->second.gpus;
    uint64_t mem = held == uses.end() ? 0 : held->second.memory;
    if (q->second.gpus && gpus + gpus_asked > *q->second.gpus + kEps)
      return std::string("quota: ") + kind + " '" + who + "' holds " + formatNumber(gpus) + " of " +
             formatNumber(*q->second.gpus) + " GPUs";
    if (q->second.memory && mem + asks * static_cast<uint64_t>(l.req.n) > *q->second.memory)
      return std::string("quota: ") + kind + " '" + who + "' holds " + formatSize(mem) + " of " +
             formatSize(*q->second.memory) + " of GPU memory";
  }
  const int queue = l.queue;
  if (fair_.active() && !l.req.preemptible && fair_.beyondGuarantee(queue, gpus_asked) > 0)
    return std::string("quota: a non-preemptible request is granted only within its queue's guarantee (") +
           (queue < 0 ? "user '" + l.req.user + "' is in no queue" : "this would take its queue beyond it") + ")";
  return fair_.limitBlocks(queue, gpus_asked, asks * static_cast<uint64_t>(l.req.n));
}

uint64_t Scheduler::asksMemory(const LeaseRequest& r, double p) const {
  return r.m ? r.m : static_cast<uint64_t>((p > 0 ? p : r.p) * static_cast<double>(largestGpu(r.pool)));
}

std::map<std::pair<std::string, int>, Gpu> Scheduler::openGpus(const LeaseRequest& r) const {
  std::map<std::pair<std::string, int>, Gpu> out;
  forEachOpenGpu(servers_, policy_, serving_, r.pool, [&](const Server& s, const Gpu& g, bool heard) {
    if (heard && mayRunOn(r, g)) out.emplace(std::pair{s.name, g.index}, g);
  });
  return out;
}

// A gang of n shares on as few servers as it can: first a server that fits all n, else the servers that
// fit the most; within a server, and between servers that rank alike, the order `fit` already has.
template <typename Candidate>
static void onFewestServers(std::vector<Candidate>& fit, int n) {
  std::map<const Server*, std::pair<int, size_t>> rank;  // server → (its fitting GPUs, capped at n; first position)
  for (size_t i = 0; i < fit.size(); ++i) {
    auto it = rank.try_emplace(fit[i].server, 0, i).first;
    it->second.first = std::min(it->second.first + 1, n);
  }
  std::stable_sort(fit.begin(), fit.end(), [&](const Candidate& a, const Candidate& b) {
    const auto &ra = rank.at(a.server), &rb = rank.at(b.server);
    return ra.first != rb.first ? ra.first > rb.first : ra.second < rb.second;
  });
}

// GPU type names match in any case.
static bool sameType(const std::string& x, const std::string& y) {
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](char c, char d) { return std::tolower(c) == std::tolower(d); });
}

// An elastic request (min_p) whose whole fraction does not fit takes the largest smaller one its pool
// offers that fits now, never below min_p, once the pool's elastic_after has passed since it asked.
bool Scheduler::tryGrant(Lease& l, int64_t now, std::string& why) {
  if (tryPlace(l, l.req.p, now, why)) return true;
  const Pool* pool = policy_.pool(l.req.pool);
  if (l.req.min_p <= 0 || !pool || !pool->elastic_after || now - l.created_ms < pool->elastic_after->count()) return false;
  std::vector<double> smaller;
  for (double f : pool->fractions)
    if (f < l.req.p - kEps && f + kEps >= l.req.min_p) smaller.push_back(f);
  std::sort(smaller.rbegin(), smaller.rend());
  for (double f : smaller) {
    std::string ignored;
    if (tryPlace(l, f, now, ignored)) return true;
  }
  return false;
}

// A GPU one of a request's shares may go to, the `slot`-th of its shares there.
struct Scheduler::Place {
  Server* server;
  Gpu* gpu;
  uint64_t memory;
  int slot;      // this request's shares already placed on the GPU before this one
  double speed;  // how fast its kind runs on the GPU's type (speedOf)
  double type_free = 0;  // the free fractions of its type's GPUs in the pool, summed
};

// Every place a share of `p` of `l` fits now, in the order they are taken: a request's shares go to distinct
// GPUs where they can (each share's compute is its own), then several to one GPU (two halves of one GPU are
// two devices); to the type its kind runs fastest on (heterogeneity aware). Then pack: the fullest GPUs
// first (keeps whole GPUs free); spread: the emptiest first. Between GPUs alike in all that, the type with
// the most room (no type is filled first for its name). Fewer than it asks: `why` says what it waits for.
std::vector<Scheduler::Place> Scheduler::placesFor(const Lease& l, double p, std::string& why) {
  const Pool* pool = policy_.pool(l.req.pool);
  std::vector<Place> fit;
  int in_pool = 0, gpus_fit = 0;
  std::map<std::string, double> type_free;
  forEachOpenGpu(servers_, policy_, serving_, pool->name, [&](Server& s, Gpu& g, bool heard) {
    if (heard) type_free[g.type] += std::max(0.0, 1.0 - g.used_fraction);
    if (!mayRunOn(l.req, g) || (!l.round_type.empty() && !sameType(l.round_type, g.type))) return;  // (a round's choice)
    ++in_pool;
    if (!heard) return;
    uint64_t mem = shareMemory(l.req, p, g);
    int slots = sharesThatFit(g, p, mem, l.req.n);
    gpus_fit += slots > 0;
    double speed = pool->heterogeneity == Heterogeneity::kAware ? speedOf(l.req.kind, g.type) : 1.0;
    for (int j = 0; j < slots; ++j) fit.push_back({&s, &g, mem, j, speed});
  });
  if (static_cast<int>(fit.size()) < l.req.n) {
    why = "waiting for " + std::to_string(l.req.n) + " GPU(s) with " + formatNumber(p) + " free in pool '" +
          pool->name + "' (" + std::to_string(gpus_fit) + " of " + std::to_string(in_pool) + " available GPUs fit now)";
    return fit;
  }
  for (Place& c : fit) c.type_free = type_free[c.gpu->type];
  std::stable_sort(fit.begin(), fit.end(), [&](const Place& a, const Place& b) {
    if (a.slot != b.slot) return a.slot < b.slot;
    if (a.speed != b.speed) return a.speed > b.speed;
    if (a.gpu->used_fraction != b.gpu->used_fraction)
      return pool->placement == Placement::kSpread ? a.gpu->used_fraction < b.gpu->used_fraction
                                                   : a.gpu->used_fraction > b.gpu->used_fraction;
    return a.type_free > b.type_free;
  });
  onFewestServers(fit, l.req.n);
  return fit;
}

bool Scheduler::tryPlace(Lease& l, double p, int64_t now, std::string& why) {
  if (auto q = quotaBlocks(l, p)) {
    why = *q;
    return false;
  }
  std::vector<Place> fit = placesFor(l, p, why);
  if (static_cast<int>(fit.size()) < l.req.n) return false;
  l.shares.clear();
  int64_t expiry = unix_seconds_() + std::chrono::duration_cast<std::chrono::seconds>(policy_.token_ttl).count();
  for (int i = 0; i < l.req.n; ++i) {
    Place& c = fit[static_cast<size_t>(i)];
    c.gpu->used_fraction += p;
    c.gpu->used_memory += c.memory;
    Share s{c.server->name, c.server->address, c.gpu->uuid, "", c.gpu->index, p, c.memory};
    s.token = sign_(l, s, i, expiry);
    l.shares.push_back(std::move(s));
    touch(*c.server);
  }
  if (l.state == LeaseState::kQueued) queue_.remove(l);
  l.state = LeaseState::kGranted;
  placedOn(l, true);
  account(l, +1);
  l.granted_ms = l.limit_from_ms = l.active_ms = now;
  l.granted_unix_s = unix_seconds_();
  l.heartbeat_ms = now;
  l.token_expiry_s = expiry;
  l.wait_reason.clear();
  touch(l);
  return true;
}

void Scheduler::account(const Lease& l, int sign) {
  std::vector<Use*> uses{&user_use_[l.req.user]};
  for (const auto& g : l.req.chargedGroups()) uses.push_back(&group_use_[g]);
  for (Use* u : uses)
    for (const auto& s : l.shares) {
      u->gpus = std::max(0.0, u->gpus + sign * s.fraction);
      u->memory = sign > 0 ? u->memory + s.memory : u->memory - std::min(u->memory, s.memory);
    }
  for (const auto& s : l.shares) fair_.charge(l.queue, s.fraction, s.memory, sign);
}

// Counts a share on its GPU of `s` (a grant, a restored lease, a share found still running there).
static void countOnGpu(Server& s, const Share& sh) {
  for (auto& g : s.gpus)
    if (g.index == sh.device) g.used_fraction += sh.fraction, g.used_memory += sh.memory;
}

void Scheduler::freeOnGpu(const std::string& server, int device, double fraction, uint64_t memory) {
  auto it = servers_.find(server);
  if (it == servers_.end()) return;
  for (auto& g : it->second.gpus)
    if (g.index == device) {
      g.used_fraction = std::max(0.0, g.used_fraction - fraction);
      g.used_memory = g.used_memory >= memory ? g.used_memory - memory : 0;
    }
}

// A share whose server still runs a worker for it drains: its GPU stays counted until the server reports
// the worker gone. Quotas are the user's: freed at once.
void Scheduler::release(Lease& l) {
  if (l.state != LeaseState::kGranted) return;
  account(l, -1);
  for (const auto& s : l.shares) {
    auto srv = servers_.find(s.server);
    auto reported = serving_.find(s.server);
    bool served = srv != servers_.end() && srv->second.up && reported != serving_.end() && reported->second.count(l.id);
    if (served) draining_[s.server].push_back({l.id, s.device, s.fraction, s.memory});
    else freeOnGpu(s.server, s.device, s.fraction, s.memory);
  }
}

bool Scheduler::settleDraining(const std::string& server) {
  auto it = draining_.find(server);
  auto reported = serving_.find(server);
  if (it == draining_.end() || reported == serving_.end()) return false;
  const auto& serving = reported->second;
  auto& shares = it->second;
  auto done = std::stable_partition(shares.begin(), shares.end(), [&](const Draining& d) { return serving.count(d.lease) > 0; });
  bool freed = done != shares.end();
  for (auto d = done; d != shares.end(); ++d) freeOnGpu(server, d->device, d->fraction, d->memory);
  shares.erase(done, shares.end());
  if (shares.empty()) draining_.erase(it);
  return freed;
}

std::vector<const Lease*> Scheduler::queue() const {
  std::vector<const Lease*> q;
  q.reserve(queue_.size());
  for (const auto& entry : queue_.entries()) q.push_back(WaitQueue::leaseOf(entry));
  return q;
}

int Scheduler::position(const std::string& id) const {
  const Lease* l = lease(id);
  if (!l || l->state != LeaseState::kQueued) return 0;
  return fair_.active() && l->grant_position > 0 ? l->grant_position : queue_.position(*l);
}

// Whether two requests may want the same GPUs: one takes any type, or they name a type in common.
static bool typesOverlap(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  if (a.empty() || b.empty()) return true;
  return std::any_of(a.begin(), a.end(), [&](const std::string& x) {
    return std::any_of(b.begin(), b.end(), [&](const std::string& y) { return sameType(x, y); });
  });
}

// Whether two requests may want the same GPUs, a round's choice of type standing for the types a
// request accepts (without making a list: this runs for every waiting request).
static bool wantSameGpus(const Lease& a, const Lease& b) {
  auto accepts = [](const Lease& l, const std::string& type) {
    return l.req.gpu_types.empty() || std::any_of(l.req.gpu_types.begin(), l.req.gpu_types.end(), [&](const std::string& t) { return sameType(t, type); });
  };
  if (!a.round_type.empty() && !b.round_type.empty()) return sameType(a.round_type, b.round_type);
  if (!a.round_type.empty()) return accepts(b, a.round_type);
  if (!b.round_type.empty()) return accepts(a, b.round_type);
  return typesOverlap(a.req.gpu_types, b.req.gpu_types);
}

namespace {
// Requests waiting for capacity hold back the later ones of their pool that want the same GPUs (any GPU,
// or a type in common): one waiting for an H100 does not hold back one that may take an A100.
class HeldBack {
 public:
  bool holds(const Lease& l) const {
    auto it = by_pool_.find(l.req.pool);
    if (it == by_pool_.end()) return false;
    auto overlaps = [&](const std::vector<std::string>& mine) {
      return std::any_of(it->second.types.begin(), it->second.types.end(), [&](const auto& t) { return typesOverlap(t, mine); });
    };
    // A round's choice of type stands for the types it accepts (a list made only then: this runs for
    // every request held back, on every pass).
    return l.round_type.empty() ? overlaps(l.req.gpu_types) : overlaps({l.round_type});
  }
  void add(const Lease& l) {  // a round's choice of type stands for the types it accepts
    auto [it, first] = by_pool_.try_emplace(l.req.pool);
    if (first) it->second.why = "behind an earlier request in pool '" + l.req.pool + "'";
    it->second.types.push_back(l.round_type.empty() ? l.req.gpu_types : std::vector<std::string>{l.round_type});
  }
  // Every GPU of the pool is waited for: nothing later in it can be granted.
  bool whole(const std::string& pool) const {
    auto it = by_pool_.find(pool);
    return it != by_pool_.end() && std::any_of(it->second.types.begin(), it->second.types.end(), [](const auto& t) { return t.empty(); });
  }
  const std::string& why(const std::string& pool) const { return by_pool_.at(pool).why; }  // of a pool that holds

 private:
  struct Held {
    std::vector<std::vector<std::string>> types;  // what each request waiting for capacity waits for
    std::string why;                                     // what the ones it holds back are told
  };
  std::map<std::string, Held> by_pool_;
};
}  // namespace

// Tries queued requests in grant order (wait_queue.h). Within a pool the queue is strict: the first that
// waits for capacity holds back the rest of its pool. Once every pool is held back, the request path
// stops; the tick goes on through the rest (the wait that ran out, why each waits). A pass grants at most
// kGrantsPerPass, then leaves the rest to grantMore().
void Scheduler::schedule(int64_t now, bool preempt) {
  more_to_grant_ = false;
  int grants = 0;
  HeldBack held;
  std::map<std::string, int> placed;  // pool → how many it has passed that still wait (grant_position)
  auto allHeld = [&] {
    return std::all_of(queue_.pools().begin(), queue_.pools().end(), [&](const auto& p) { return held.whole(p.first); });
  };
  WaitQueue::GrantOrder order(queue_, fair_);
  while (Lease* next = order.next()) {
    Lease& l = *next;
    if (l.req.wait_ms >= 0 && now - l.created_ms > l.req.wait_ms) {
      end(l.id, "the wait ran out (" + std::to_string(l.req.wait_ms / 1000) + " s) while " + l.wait_reason, now);
      continue;
    }
    if (held.holds(l)) {  // the common case with a long queue: kept cheap
      l.grant_position = ++placed[l.req.pool];
      if (preempt)  // (ticks say why)
        if (const std::string& why = held.why(l.req.pool); l.wait_reason != why) l.wait_reason = why, touch(l);
      continue;
    }
    std::string why;
    if (tryGrant(l, now, why)) {
      if (++grants == kGrantsPerPass) {
        more_to_grant_ = true;
        return;
      }
      order.regrade();  // the granted queue now holds more
      continue;
    }
    l.grant_position = ++placed[l.req.pool];
    if (why.rfind("quota", 0) != 0) {
      held.add(l);
      if (preempt && fair_.active() && withinGuarantee(l))  // take borrowed capacity back
        if (int n = preemptFor(l, now))
          why += "; within its queue's guarantee, so " + std::to_string(n) + " borrowing lease(s) are being preempted for it";
    }
    if (preempt || l.wait_reason.rfind(why, 0) != 0) {  // what the last tick added about preemption stays
      if (why != l.wait_reason) l.wait_reason = why, touch(l);
    }
    if (!preempt && held.whole(l.req.pool) && allHeld()) break;
  }
}

bool LeaseRequest::accepts(const Gpu& g) const {
  return gpu_types.empty() || std::any_of(gpu_types.begin(), gpu_types.end(), [&](const std::string& t) { return sameType(t, g.type); });
}

double Lease::heldGpus() const {
  double gpus = 0;
  for (const auto& s : shares) gpus += s.fraction;
  return gpus;
}

const Gpu* Scheduler::gpuOf(const Share& sh) const {
  auto s = servers_.find(sh.server);
  if (s == servers_.end()) return nullptr;
  for (const auto& g : s->second.gpus)
    if (g.index == sh.device) return &g;
  return nullptr;
}

void Scheduler::typeGpus(Server& s) const {
  for (auto& g : s.gpus) g.type = policy_.gpuTypeOf(g.model);
}

std::vector<std::string> LeaseRequest::chargedGroups() const {
  std::vector<std::string> out;
  if (!group.empty()) out.push_back(group);
  for (const auto& g : member_of)
    if (!g.empty() && std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  return out;
}

namespace {

// What a request may not ask, whatever the policy: the reason, or nullopt.
std::optional<std::string> outOfBounds(const LeaseRequest& req) {
  if (req.n < 1 || req.n > 1024) return "n must be between 1 and 1024 GPUs";
  if (!(req.p > 0 && req.p <= 1)) return "p must be a fraction in (0, 1]";
  if (req.min_p < 0 || req.min_p > req.p) return "min_p (the least fraction an elastic request takes) must be in (0, p]";
  if (req.m > (1ull << 50)) return "m is larger than any GPU";
  if (req.user.empty() || req.user.size() > 64 || req.group.size() > 64 || req.pool.size() > 64 || req.priority.size() > 64 ||
      req.kind.size() > 64 || req.job.size() > 64)
    return "user (1-64 characters), group, pool, priority, kind and job must be short names";
  return std::nullopt;
}

}  // namespace

// The request as a queued lease: its priority, queue and place in its pool's order.
Lease& Scheduler::enqueueNew(LeaseRequest req, int64_t now, const std::string& id, const std::string& owner_key_hash) {
  Lease l;
  l.id = id;
  l.req = std::move(req);
  if (l.req.time_limit_ms == 0) l.req.time_limit_ms = policy_.pool(l.req.pool)->max_time.count();
  l.owner_key_hash = owner_key_hash;
  l.priority = priorityOf(l.req.priority);
  l.queue = fair_.queueOf(policy_, l.req.user, l.req.chargedGroups());
  l.seq = next_seq_++;
  l.created_ms = l.heartbeat_ms = now;
  Lease& stored = leases_[id] = std::move(l);
  live_.emplace(id, &stored);
  enqueue(stored);
  touch(stored);
  return stored;
}

// Whether a request of its pool that quota does not block comes before `l`: of equal or higher priority;
// with queues, earlier in the fair order (fairOrder).
bool Scheduler::waitingAhead(const Lease& l) const {
  const double mine = fair_.active() ? fair_.beyondGuarantee(l.queue, l.req.n * l.req.p) : 0;
  auto ahead = [&](const Lease& q) {  // in priority class, then the pool's order
    return q.priority > l.priority || (q.priority == l.priority && q.order_key <= l.order_key);
  };
  auto comesFirst = [&](const Lease& q) {
    if (!fair_.active()) return ahead(q);
    double theirs = fair_.beyondGuarantee(q.queue, q.req.n * q.req.p);
    return theirs < mine || (theirs == mine && ahead(q));
  };
  for (const auto& entry : queue_.entries()) {
    const Lease& q = *WaitQueue::leaseOf(entry);
    if (&q != &l && q.req.pool == l.req.pool && wantSameGpus(q, l) && comesFirst(q) && !quotaBlocks(q)) return true;
  }
  return false;
}

Decision Scheduler::request(LeaseRequest req, int64_t now, const std::string& id, const std::string& owner_key_hash) {
  Decision d;
  if (auto why = outOfBounds(req)) {
    d.reason = *why;
    return d;
  }
  if (auto why = neverFits(req)) {
    d.reason = *why;
    return d;
  }
  Lease& stored = enqueueNew(std::move(req), now, id, owner_key_hash);
  d.lease = &stored;
  // Granted now only if no request comes before it. Notice for it, where it is within its queue's
  // guarantee, comes with the next tick.
  const bool waiting_ahead = waitingAhead(stored);
  std::string why;
  if (!waiting_ahead) tryGrant(stored, now, why);
  if (stored.state == LeaseState::kGranted) {
    d.kind = Decision::kGranted;
    return d;
  }
  if (waiting_ahead && why.empty()) why = "behind an earlier request in pool '" + stored.req.pool + "'";
  if (stored.req.wait_ms == 0) {
    end(id, "not granted at once and the client will not wait: " + why, now);
    d.reason = "no capacity now (" + why + ") and no --wait";
    d.kind = Decision::kRefused;
    return d;
  }
  stored.wait_reason = why;
  d.kind = Decision::kQueued;
  d.reason = why;
  return d;
}

bool Scheduler::heartbeatLease(const std::string& id, int64_t now) {
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.state == LeaseState::kEnded) return false;
  it->second.heartbeat_ms = now;  // not persisted on every beat: a restart grants a fresh timeout
  return true;
}

bool Scheduler::renewTokens(const std::string& id) {
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.state != LeaseState::kGranted) return false;
  Lease& l = it->second;
  const int64_t ttl_s = std::chrono::duration_cast<std::chrono::seconds>(policy_.token_ttl).count();
  const int64_t now_s = unix_seconds_();
  if (l.token_expiry_s - now_s > ttl_s / 2) return false;
  l.token_expiry_s = now_s + ttl_s;
  for (size_t i = 0; i < l.shares.size(); ++i)
    l.shares[i].token = sign_(l, l.shares[i], static_cast<int>(i), l.token_expiry_s);
  touch(l);
  return true;
}

bool Scheduler::reportProgress(const std::string& id, double progress, int64_t now) {
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.state != LeaseState::kGranted) return false;
  measure(throughputs_, it->second, it->second.progress, progress, now);
  return true;
}

bool Scheduler::reportLaunches(const std::string& server, const std::string& id, double launches, int64_t now) {
  auto on = granted_on_.find(server);
  if (on == granted_on_.end() || !on->second.count(id)) return false;
  Lease& l = leases_.at(id);
  noteLaunches(l, server, launches, now);
  measure(launch_rates_, l, l.launches, launches, now);
  return true;
}

Lease::Use Lease::used() const {
  Use sum;
  for (const auto& [server, u] : use_on) sum.memory += u.memory, sum.device_s += u.device_s, sum.held_s += u.held_s;
  return sum;
}

bool Scheduler::reportUse(const std::string& server, const std::string& id, const Lease::Use& use) {
  auto on = granted_on_.find(server);
  if (on == granted_on_.end() || !on->second.count(id)) return false;
  leases_.at(id).use_on[server] = use;
  return true;
}

void Scheduler::measure(Throughputs& into, Lease& l, Lease::Count& last, double count, int64_t now) {
  const Gpu* g = l.req.n == 1 && !l.shares.empty() ? gpuOf(l.shares[0]) : nullptr;
  if (g && last.ms > 0 && count > last.value && now > last.ms)
    into.add(l.req.kind, g->type, (count - last.value) * 1000 / static_cast<double>(now - last.ms), l.shares[0].fraction);
  last = {count, now};  // (a count that fell started again: measured from here)
}

bool Scheduler::end(const std::string& id, const std::string& reason, int64_t now) {
  const Lease* l = lease(id);
  bool was_granted = l && l->state == LeaseState::kGranted;
  if (!finish(id, reason, now)) return false;
  if (was_granted) schedule(now);
  return true;
}

bool Scheduler::finish(const std::string& id, const std::string& reason, int64_t now) {
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.state == LeaseState::kEnded) return false;
  Lease& l = it->second;
  chargeAttained(l, now);  // the service its job had (least-attained pools, rounds)
  if (l.state == LeaseState::kGranted) placedOn(l, false);
  release(l);
  if (l.state == LeaseState::kQueued) queue_.remove(l);
  live_.erase(id);
  ended_.emplace_back(now, id);
  l.state = LeaseState::kEnded;
  l.end_reason = reason;
  l.ended_ms = now;
  l.ended_unix_s = unix_seconds_();
  touch(l);
  return true;
}

bool Scheduler::clientLeft(const std::string& server, const std::string& id, int64_t now) {
  const Lease* l = lease(id);
  if (auto it = serving_.find(server); it != serving_.end()) it->second.erase(id);
  if (settleDraining(server)) schedule(now);
  if (!l || l->state != LeaseState::kGranted || !l->req.ends_with_clients) return false;  // its holder releases it
  bool on_server = std::any_of(l->shares.begin(), l->shares.end(), [&](const Share& s) { return s.server == server; });
  return on_server && end(id, "released (its client disconnected from " + server + ")", now);
}

void Scheduler::registerServer(Server s, int64_t now) {
  s.up = true;
  s.heartbeat_ms = now;
  auto old = servers_.find(s.name);
  if (old != servers_.end()) s.drain = old->second.drain;
  for (auto& g : s.gpus) g.used_fraction = 0, g.used_memory = 0;
  typeGpus(s);
  serving_[s.name].clear();  // a server (re)starting runs no worker: they end with it
  draining_.erase(s.name);
  for (const auto& [id, lp] : live_) {
    const Lease& l = *lp;
    if (l.state != LeaseState::kGranted) continue;
    for (const auto& sh : l.shares)
      if (sh.server == s.name) countOnGpu(s, sh);
  }
  std::string name = s.name;
  servers_[name] = std::move(s);
  touch(servers_[name]);
  schedule(now);
}

bool Scheduler::heartbeatServer(const std::string& name, int64_t now, const std::vector<std::string>& serving,
                                std::vector<std::string>& revoked) {
  auto it = servers_.find(name);
  if (it == servers_.end()) return false;
  it->second.heartbeat_ms = now;
  if (!it->second.up) {
    it->second.up = true;
    touch(it->second);
    schedule(now);
  }
  serving_[name] = std::set<std::string>(serving.begin(), serving.end());
  drainUncounted(name, serving);
  if (settleDraining(name)) {
    ++version_;
    schedule(now);
  }
  revoked.clear();
  if (auto d = draining_.find(name); d != draining_.end())  // again in every answer, until the server stops them
    for (const auto& share : d->second)
      if (std::find(revoked.begin(), revoked.end(), share.lease) == revoked.end()) revoked.push_back(share.lease);
  return true;
}

// Ended leases a server serves with no draining share counted (the allocator restarted since they ended,
// or a worker started after its lease ended): their shares are on its GPUs, so count them, until it
// stops serving them.
void Scheduler::drainUncounted(const std::string& name, const std::vector<std::string>& serving) {
  auto& shares = draining_[name];
  for (const auto& id : serving) {
    const Lease* l = lease(id);
    if (!l || l->state != LeaseState::kEnded) continue;
    if (std::any_of(shares.begin(), shares.end(), [&](const Draining& d) { return d.lease == id; })) continue;
    for (const auto& sh : l->shares) {
      if (sh.server != name) continue;
      shares.push_back({id, sh.device, sh.fraction, sh.memory});
      countOnGpu(servers_.at(name), sh);
    }
  }
  if (shares.empty()) draining_.erase(name);
}

std::vector<std::string> Scheduler::liveLeasesOn(const std::string& server) const {
  auto it = granted_on_.find(server);
  return it == granted_on_.end() ? std::vector<std::string>{} : std::vector<std::string>(it->second.begin(), it->second.end());
}

void Scheduler::placedOn(const Lease& l, bool granted) {
  for (const auto& sh : l.shares) {
    if (granted) {
      granted_on_[sh.server].insert(l.id);
    } else if (auto it = granted_on_.find(sh.server); it != granted_on_.end()) {
      it->second.erase(l.id);
      if (it->second.empty()) granted_on_.erase(it);
    }
  }
}

bool Scheduler::setDrain(const std::string& name, bool drain) {
  auto it = servers_.find(name);
  if (it == servers_.end()) return false;
  it->second.drain = drain;
  touch(it->second);
  return true;
}

void Scheduler::setPolicy(Policy p, int64_t now) {
  std::vector<Lease*> queued;  // they leave the queue while their priority and queue change
  for (const auto& entry : queue_.entries()) queued.push_back(WaitQueue::leaseOf(entry));
  queue_.clear();
  for (const auto& [id, lp] : live_)
    if (lp->state == LeaseState::kGranted) account(*lp, -1);
  policy_ = std::move(p);
  round_choice_.clear();  // rounds start afresh under the new policy (a pool may have none now)
  next_round_.clear();
  fair_.reset(policy_.queues);
  for (auto& [name, s] : servers_) typeGpus(s);
  for (const auto& [id, lp] : live_) {
    Lease& l = *lp;
    l.queue = fair_.queueOf(policy_, l.req.user, l.req.chargedGroups());
    if (l.state == LeaseState::kGranted) account(l, +1);
  }
  for (Lease* l : queued) {
    l->priority = priorityOf(l->req.priority);
    l->grant_position = 0;  // the next pass places it
    enqueue(*l);
    if (auto why = neverFits(l->req)) end(l->id, "refused under the new policy: " + *why, now);
  }
  ++version_;
  schedule(now);
}

bool Scheduler::tick(int64_t now, bool judge) {
  uint64_t before = version_;
  if (!judge) {  // preemption's deadlines and time limits are the allocator's own: kept even while it is backlogged
    limitTimes(now);
    revokePreempted(now);
    schedule(now, true);
    return version_ != before;
  }
  for (auto& [name, s] : servers_) {
    if (!s.up || now - s.heartbeat_ms <= policy_.server_timeout.count()) continue;
    s.up = false;
    touch(s);
    serving_.erase(name);  // its GPUs are withdrawn: nothing of it drains
    if (auto d = draining_.find(name); d != draining_.end()) {
      for (const auto& share : d->second) freeOnGpu(name, share.device, share.fraction, share.memory);
      draining_.erase(d);
    }
    for (const auto& id : liveLeasesOn(name)) finish(id, "server " + name + " stopped heartbeating; its GPUs were withdrawn", now);
  }
  std::vector<std::string> silent;
  for (const auto& [id, lp] : live_)
    if (now - lp->heartbeat_ms > policy_.lease_ttl.count()) silent.push_back(id);
  for (const auto& id : silent)
    finish(id, std::string("expired: no heartbeat for ") + std::to_string(policy_.lease_ttl.count()) + " ms while " +
                stateName(leases_.at(id).state), now);
  limitTimes(now);
  reclaimIdle(now);
  revokePreempted(now);
  planRounds(now);
  schedule(now, true);
  planMoves(now);
  return version_ != before;
}

bool Scheduler::grantMore(int64_t now) {
  uint64_t before = version_;
  schedule(now, true);
  return version_ != before;
}

void Scheduler::forgive(int64_t ms) {
  for (auto& [name, s] : servers_) s.heartbeat_ms += ms;
  for (const auto& [id, lp] : live_) lp->heartbeat_ms += ms, lp->active_ms += ms;
}

const Lease* Scheduler::lease(const std::string& id) const {
  auto it = leases_.find(id);
  return it == leases_.end() ? nullptr : &it->second;
}

// The names collected in `dirty`, each once; `dirty` is left empty.
static std::vector<std::string> takeUnique(std::vector<std::string>& dirty) {
  std::vector<std::string> out;
  out.swap(dirty);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> Scheduler::takeDirtyLeases() { return takeUnique(dirty_leases_); }
std::vector<std::string> Scheduler::takeDirtyServers() { return takeUnique(dirty_servers_); }

void Scheduler::restore(std::map<std::string, Server> servers, std::map<std::string, Lease> leases, int64_t now) {
  servers_ = std::move(servers);
  leases_ = std::move(leases);
  for (auto& [name, s] : servers_) {
    s.heartbeat_ms = now;  // a grace period to heartbeat again
    for (auto& g : s.gpus) g.used_fraction = 0, g.used_memory = 0;
    typeGpus(s);
  }
  live_.clear();
  granted_on_.clear();
  queue_.clear();
  ended_.clear();
  user_use_.clear();
  group_use_.clear();
  for (auto& [id, l] : leases_) {
    next_seq_ = std::max(next_seq_, l.seq + 1);
    if (l.state == LeaseState::kEnded) {
      ended_.emplace_back(now, id);
      continue;
    }
    live_.emplace(id, &l);
    l.heartbeat_ms = now;
    l.queue = fair_.queueOf(policy_, l.req.user, l.req.chargedGroups());
    if (l.state == LeaseState::kQueued) enqueue(l);
    if (l.state != LeaseState::kGranted) continue;
    // Its time limit counts from its grant by the wall clock, which another host's replica shares (the
    // *_ms times are this host's monotonic clock).
    l.limit_from_ms = l.granted_unix_s > 0 ? now - (unix_seconds_() - l.granted_unix_s) * 1000 : l.granted_ms;
    l.active_ms = now;  // (its servers' counts are not kept: idle from here at most)
    account(l, +1);
    placedOn(l, true);
    for (const auto& sh : l.shares) {
      if (auto it = servers_.find(sh.server); it != servers_.end()) countOnGpu(it->second, sh);
    }
  }
  ++version_;
}

double Scheduler::orderKey(const Lease& l) const {
  constexpr double kBehindChosen = 1e15;  // a round chose requests 0, 1, 2, ...
  const Pool* pool = policy_.pool(l.req.pool);
  return (pool && pool->round.count() > 0 ? kBehindChosen : 0) + orderValue(l);
}

double Scheduler::orderValue(const Lease& l) const {
  const Pool* pool = policy_.pool(l.req.pool);
  if (!pool) return 0;
  switch (pool->order) {
    case Order::kShortestFirst:
      return l.req.estimate_s > 0 ? l.req.estimate_s : std::numeric_limits<double>::max();
    case Order::kLeastAttained: {
      auto a = attained_.find(jobOf(l));
      return a == attained_.end() ? 0 : a->second.seconds;
    }
    default:
      return 0;
  }
}

void Scheduler::prune(int64_t now, int64_t keep_ms) {
  // A job's service is forgotten a day after it was last charged or seen in a round (not before: it is
  // looked at again then).
  for (constexpr int64_t kDayMs = 24 * 3600 * 1000; !attained_at_.empty() && now - attained_at_.front().first > kDayMs;
       attained_at_.pop_front()) {
    auto a = attained_.find(attained_at_.front().second);
    if (a == attained_.end()) continue;
    if (now - a->second.last_ms > kDayMs) attained_.erase(a);
    else attained_at_.emplace_back(a->second.last_ms, a->first);
  }
  while (!ended_.empty() && now - ended_.front().first > keep_ms) {
    auto it = leases_.find(ended_.front().second);
    if (it != leases_.end() && it->second.state == LeaseState::kEnded) leases_.erase(it);
    ended_.pop_front();
  }
}

}  // namespace gpool::allocator
