// The allocator's state and decisions: the GPU inventory, leases (granted or queued) and the grant
// logic. No I/O here: the HTTP layer calls it under one mutex, and the store persists what changed.
// Times are milliseconds on the steady clock of the caller's choosing (tests pass their own).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fair_share.h"
#include "gpool/allocator/notices.h"
#include "policy.h"
#include "throughput.h"
#include "wait_queue.h"

namespace gpool::allocator {

struct Gpu {
  int index = 0;
  std::string uuid, model;
  uint64_t memory = 0;
  int sms = 0;
  double used_fraction = 0;
  uint64_t used_memory = 0;
  std::string type;  // its GPU type (Policy::gpuTypeOf its model), kept by the scheduler
};

struct Server {
  std::string name, address;  // address: HOST:PORT clients connect to
  std::vector<Gpu> gpus;
  bool up = true, drain = false;
  int64_t heartbeat_ms = 0;
};

struct Share {
  std::string server, address, uuid, token;
  int device = 0;
  double fraction = 0;
  uint64_t memory = 0;
};

enum class LeaseState { kQueued, kGranted, kEnded };
const char* stateName(LeaseState s);

struct LeaseRequest {
  int n = 1;
  double p = 1.0;       // fraction of each GPU
  uint64_t m = 0;       // memory per GPU in bytes; 0: p × the GPU's memory
  std::string user, group, pool = "default", priority;  // priority: a class name ("" = the default)
  // Every group the requester is in (identity.h): their quotas apply too, so naming no group, or another
  // one, escapes none of them. Set by the allocator from the caller's identity, never from the request.
  std::vector<std::string> member_of;
  int64_t wait_ms = 0;  // how long the client will wait in the queue (0: not at all)
  bool preemptible = true;  // false: never preempted to give a queue its guarantee back (and, with queues,
                            // granted only within the requester's queue's guarantee)
  // Elastic (gpool run --min-fraction): when p does not fit, any fraction the pool offers down to min_p
  // (0: not elastic), after the pool's elastic_after. The shares say what was granted.
  double min_p = 0;
  // GPU types it may run on (gpool run --gpu-type), any case; empty: any.
  std::vector<std::string> gpu_types;
  // What kind of job it is (gpool run --kind): how fast it runs on each type is measured from its kind's
  // progress reports (throughput.h), or the policy's [job_kinds] says.
  std::string kind;
  // Its command runs again after preemption (gpool run --requeue): the allocator may move it to a faster
  // GPU type (moves.cpp) by preempting it.
  bool restartable = false;
  // The job it is for, the same across its requeues (gpool run sets one per run): the service it has
  // attained counts for least-attained-service pools. Empty: the lease alone.
  std::string job;
  double estimate_s = 0;  // its run time alone on its fastest GPU type, if known (shortest-first pools)
  // true: the lease ends once its last client process has left its servers (a lease taken through the API
  // alone). false: it lasts from one process to the next until its holder releases it (gpool run and gpool
  // lease, which release it when their command ends), it expires or is revoked.
  bool ends_with_clients = true;
  // The lease ends this long after its grant (gpool run --time), with notice the policy's
  // preemption_grace before (time_limits.cpp). 0: none asked; the pool's max_time, where it has one, is
  // then the limit, and caps what is asked.
  int64_t time_limit_ms = 0;

  std::vector<std::string> chargedGroups() const;  // `group` and `member_of`, each once
  bool accepts(const Gpu& g) const;                 // g is of a type it may run on
};

struct Lease {
  std::string id;
  LeaseRequest req;
  int priority = 0;
  uint64_t seq = 0;  // arrival order
  LeaseState state = LeaseState::kQueued;
  int64_t created_ms = 0, heartbeat_ms = 0, granted_ms = 0, ended_ms = 0, token_expiry_s = 0;
  int64_t ended_unix_s = 0;  // when it ended by the wall clock (the *_ms times are the allocator's monotonic clock)
  int64_t granted_unix_s = 0;  // when it was granted by the wall clock (0: never, or granted before it was kept)
  int64_t limit_from_ms = 0;   // its grant on this allocator's clock, from granted_unix_s after a restore (time limits). Not persisted
  // Idleness (idle_leases.cpp): when a kernel last ran on its GPUs as its servers count them (from its
  // grant, or this allocator's start), and each server's last count. Not persisted.
  int64_t active_ms = 0;
  std::map<std::string, double> launched_on;
  std::string end_reason;   // released, expired, server down, cancelled, wait ran out, disconnected
  std::string wait_reason;  // why it is queued
  std::string owner_key_hash;  // hex SHA-256 of the lease key its requester got (who may heartbeat, read, release it)
  // Preemption (preemption.cpp): notice was given; the lease ends at preempt_at_ms (0: none) unless the
  // request it makes room for (preempted_for) no longer waits by then.
  int64_t preempt_at_ms = 0;
  // Why it has notice (gpool/allocator/notices.h): preemption.cpp, moves.cpp, rounds.cpp or time_limits.cpp.
  Notice notice = Notice::kNone;
  std::string preempted_for;
  int queue = -1;  // the policy queue it charges (FairShare's index; -1: none), kept by the scheduler
  double order_key = 0;  // its place in its pool's order while queued (Scheduler::orderKey), kept by the scheduler
  // With queues: its place among its pool's queued requests in grant order, as the last pass over the
  // wait queue that reached it found it (0: none has yet). Not persisted.
  int grant_position = 0;
  // Rounds (rounds.cpp): while queued, the GPU type its pool's last round chose for it ("": none; it waits
  // behind those chosen). Not persisted.
  std::string round_type;
  int64_t attained_to_ms = 0;  // its job's attained service is counted up to here (0: from granted_ms)
  struct Count {
    double value = 0;  // the last count
    int64_t ms = 0;    // when it came (0: none yet)
  };
  Count progress;  // what its job last reported (GPOOL_PROGRESS_FILE), in its kind's unit. Not persisted
  Count launches;  // the kernels its workers launched, as its server last counted them. Not persisted
  struct Use {      // what a server measured of its shares there (gpool-server's heartbeats)
    double memory = 0;    // bytes its processes hold
    double device_s = 0;  // device time its kernels took (shares below a whole GPU: those are timed)
    double held_s = 0;    // time its launches waited for its share of the GPU's time
  };
  std::map<std::string, Use> use_on;  // by server, as each last reported it. Not persisted
  Use used() const;                   // use_on summed over its servers
  std::vector<Share> shares;

  double heldGpus() const;  // the fractions of GPUs its shares hold, summed
};

struct Decision {
  enum Kind { kGranted, kQueued, kRefused } kind = kRefused;
  std::string reason;  // refused: why it can never be granted; queued: what it waits for
  const Lease* lease = nullptr;
};

struct RoundJob;  // a candidate of a pool's round (rounds.cpp)

class Scheduler {
 public:
  // Signs a share's token: (lease, share, expiry in unix seconds) → token text.
  using Signer = std::function<std::string(const Lease&, const Share&, int index, int64_t expiry_s)>;  // index: the share's, in the lease
  Scheduler(Policy policy, Signer signer, std::function<int64_t()> unix_seconds);

  const Policy& policy() const { return policy_; }
  // Replaces the policy; queued requests that can now never fit are refused, the rest rescheduled.
  void setPolicy(Policy p, int64_t now);

  void registerServer(Server s, int64_t now);
  // False when the server is unknown (it must register). `serving`: the leases it runs workers for.
  // `revoked` gets the leases that ended but that it still serves: sent with every answer until the
  // server stops serving them, and their shares stay counted on its GPUs until then (draining).
  bool heartbeatServer(const std::string& name, int64_t now, const std::vector<std::string>& serving,
                       std::vector<std::string>& revoked);
  // The granted leases with a share on this server: the only ones it may serve (sent with every answer
  // to its registration and heartbeats, so an ended lease stays ended there, restarts included).
  std::vector<std::string> liveLeasesOn(const std::string& server) const;
  bool setDrain(const std::string& name, bool drain);

  // `owner_key_hash`: what identifies the requester's lease key (Lease::owner_key_hash).
  Decision request(LeaseRequest req, int64_t now, const std::string& id, const std::string& owner_key_hash = "");
  bool heartbeatLease(const std::string& id, int64_t now);
  // Keeps a granted lease's tokens fresh while its holder heartbeats it: once half of token_ttl has passed,
  // its shares get new tokens, so a process its command starts later still connects. True when renewed.
  bool renewTokens(const std::string& id);
  // A granted lease's job says how far it got (a count in its kind's unit, rising while it runs): between
  // two reports, its kind's throughput on its GPU type (single-GPU leases). False when not granted.
  bool reportProgress(const std::string& id, double progress, int64_t now);
  // What gpool-server counted of a lease's kernels on `server` (its workers there, all along): between two
  // counts of a granted single-GPU lease, its kind's launch rate on the GPU's type. False when the lease
  // is not granted with a share on that server.
  bool reportLaunches(const std::string& server, const std::string& id, double launches, int64_t now);
  // What `server` measured of the lease's shares there; false as for reportLaunches.
  bool reportUse(const std::string& server, const std::string& id, const Lease::Use& use);
  const Throughputs& throughputs() const { return throughputs_; }
  const Throughputs& launchRates() const { return launch_rates_; }
  // How fast `kind` runs on `type` against its fastest (0 to 1): by progress reports, else by kernel
  // launches (for kinds whose jobs report none), else the policy's table.
  double speedOf(const std::string& kind, const std::string& type) const {
    return throughputs_.measures(policy_, kind) ? throughputs_.relative(policy_, kind, type) : launch_rates_.relative(policy_, kind, type);
  }
  // Ends a lease (any state); false when unknown or already ended.
  bool end(const std::string& id, const std::string& reason, int64_t now);
  // Ends the lease `id` if it has a share on `server` (the server saw its last client leave) and ends
  // with its clients (LeaseRequest::ends_with_clients). The server serves it no more: a draining share of
  // it there is free.
  bool clientLeft(const std::string& server, const std::string& id, int64_t now);

  // Ends leases and queued requests whose heartbeats stopped, marks silent servers down (ending their
  // leases), then grants what now fits. Returns true when anything changed. `judge` false: the caller
  // has heartbeats it has not read yet (it is overloaded), so silence proves nothing: nothing is ended.
  bool tick(int64_t now, bool judge = true);
  // Grants per pass over the wait queue, at most: where a tick (or a release) frees room for more, the
  // rest is granted by further passes, grantMore(), so no pass holds the caller's lock for long and
  // requests are answered between them.
  static constexpr int kGrantsPerPass = 16;
  bool moreToGrant() const { return more_to_grant_; }
  bool grantMore(int64_t now);  // true when anything changed
  // The allocator itself could not run for `ms` (stopped, starved of CPU): that time does not count
  // against any server's or lease's heartbeats, so it ends nothing because of its own stall.
  void forgive(int64_t ms);

  const Lease* lease(const std::string& id) const;
  // 1-based position in its pool's queue, 0 when not queued: in grant order. Without queues that is the
  // priority order, exact at any moment; with queues, the place the last pass over the queue found (each
  // tick makes one), or its place in priority order until a pass has reached it.
  int position(const std::string& id) const;
  const std::map<std::string, Server>& servers() const { return servers_; }
  // A share of an ended lease that its server still serves (a worker still runs, or stays while other
  // processes hold its memory): it stays counted on its GPU until the server reports the worker gone.
  struct Draining {
    std::string lease;
    int device;
    double fraction;
    uint64_t memory;
  };
  const std::vector<Draining>& drainingOn(const std::string& server) const {
    static const std::vector<Draining> none;
    auto it = draining_.find(server);
    return it == draining_.end() ? none : it->second;
  }
  const Gpu* gpuOf(const Share& s) const;  // the GPU a share is on (null: its server is gone)
  const std::map<std::string, Lease>& leases() const { return leases_; }
  // Queued and granted leases, by id.
  const std::map<std::string, Lease*>& live() const { return live_; }
  const FairShare& fairShare() const { return fair_; }          // the queues and what each holds
  std::vector<const Lease*> queue() const;  // in priority order (then arrival)
  size_t queued() const { return queue_.size(); }
  uint64_t preempted() const { return preempted_; }  // leases revoked to give a queue its guarantee back
  uint64_t moved() const { return moved_; }          // leases revoked to move their jobs to a faster type
  uint64_t rotated() const { return rotated_; }      // notices given by pools' rounds (rounds.cpp)
  uint64_t timeLimited() const { return time_limited_; }  // leases ended at their time limit (time_limits.cpp)
  uint64_t reclaimedIdle() const { return reclaimed_idle_; }  // leases ended for their pool's idle_timeout
  // When the next round of a pool with rounds is due (a tick then decides it); INT64_MAX: no pool has rounds.
  int64_t nextRound() const;
  uint64_t version() const { return version_; }  // bumps on every change (long-poll waiters watch it)
  // Ids changed since the caller last took them (for persistence).
  std::vector<std::string> takeDirtyLeases();
  std::vector<std::string> takeDirtyServers();
  void restore(std::map<std::string, Server> servers, std::map<std::string, Lease> leases, int64_t now);
  // Forgets ended leases older than `keep_ms` (they stay in the database's history).
  void prune(int64_t now, int64_t keep_ms);

 private:
  struct Need {
    double fraction;
    uint64_t memory;  // 0: fraction × the GPU's memory
  };
  std::optional<std::string> neverFits(const LeaseRequest& r) const;  // why, if it never can
  std::optional<std::string> notInPolicy(const LeaseRequest& r) const;
  std::optional<std::string> beyondPool(const LeaseRequest& r, const Pool& pool, uint64_t& largest) const;
  std::optional<std::string> beyondQuota(const LeaseRequest& r, uint64_t largest) const;
  Lease& enqueueNew(LeaseRequest req, int64_t now, const std::string& id, const std::string& owner_key_hash);
  bool waitingAhead(const Lease& l) const;  // a request of its pool comes before it (request())
  // Why, if a quota (or a queue's limit) keeps `l` out now, asking `p` of each GPU (default: l.req.p).
  std::optional<std::string> quotaBlocks(const Lease& l, double p = 0) const;
  uint64_t largestGpu(const std::string& pool) const;                 // memory of the pool's largest GPU
  // end() without scheduling what the room lets in: for the tick, which ends many and then schedules once.
  bool finish(const std::string& id, const std::string& reason, int64_t now);
  bool tryGrant(Lease& l, int64_t now, std::string& why);  // l.req.p, else an elastic request's smaller fraction
  bool tryPlace(Lease& l, double p, int64_t now, std::string& why);  // grants shares of `p` if they fit now
  struct Place;
  std::vector<Place> placesFor(const Lease& l, double p, std::string& why);  // (tryPlace) where its shares would go
  // Copies of the GPUs that take new shares of r now, by (server, index): what preemption counts
  // room on (preemption.cpp).
  std::map<std::pair<std::string, int>, Gpu> openGpus(const LeaseRequest& r) const;  // (of its pool and types)
  void release(Lease& l);
  // Frees the GPU usage of `server`'s draining shares whose leases it no longer serves; true if any.
  bool settleDraining(const std::string& server);
  // Counts as draining the ended leases `name` reports serving that have no draining share yet.
  void drainUncounted(const std::string& name, const std::vector<std::string>& serving);
  void freeOnGpu(const std::string& server, int device, double fraction, uint64_t memory);
  // Grants what fits, in grant order. `preempt`: also gives notice for the queue head's guarantee (each
  // tick does; the request path, which runs it on every request, leaves that to the next tick).
  void schedule(int64_t now, bool preempt = false);
  void touch(Lease& l) { dirty_leases_.push_back(l.id), ++version_; }
  void touch(Server& s) { dirty_servers_.push_back(s.name), ++version_; }
  int priorityOf(const std::string& cls) const;
  void typeGpus(Server& s) const;  // sets each GPU's type from the policy
  // r may take a share of g: a type it accepts, and one its kind can run on.
  bool mayRunOn(const LeaseRequest& r, const Gpu& g) const {
    return r.accepts(g) && speedOf(r.kind, g.type) > 0;
  }

  Policy policy_;
  Throughputs throughputs_, launch_rates_;  // by progress reports; by kernel launches
  // A new count of a granted lease (progress or launches): the rate since the last one, into `into`.
  void measure(Throughputs& into, Lease& l, Lease::Count& last, double count, int64_t now);
  Signer sign_;
  std::function<int64_t()> unix_seconds_;
  std::map<std::string, Server> servers_;
  std::map<std::string, Lease> leases_;  // live, and ended ones until prune() (lookups only: hot paths use the sets below)
  std::map<std::string, Lease*> live_;   // queued or granted (into leases_)
  WaitQueue queue_;  // the queued leases (in leases_, which prunes only ended ones)
  std::deque<std::pair<int64_t, std::string>> ended_;      // (when, id), for prune()
  uint64_t next_seq_ = 1;
  uint64_t version_ = 0;
  uint64_t preempted_ = 0;
  bool more_to_grant_ = false;  // the last pass stopped at kGrantsPerPass
  uint64_t moved_ = 0;
  uint64_t rotated_ = 0;
  uint64_t time_limited_ = 0;
  uint64_t reclaimed_idle_ = 0;
  std::map<std::string, std::deque<int64_t>> moves_;  // pool → when its recent moves were noticed (rate cap)
  std::vector<std::string> dirty_leases_, dirty_servers_;
  // server → leases it runs workers for (its reports). A server with no entry has not reported since this
  // allocator started (or since it went down): its GPUs take no new share until it does.
  std::map<std::string, std::set<std::string>> serving_;
  std::map<std::string, std::vector<Draining>> draining_;  // server → shares of ended leases it still serves
  std::map<std::string, std::set<std::string>> granted_on_;  // server → granted leases with a share there
  void placedOn(const Lease& l, bool granted);               // keeps granted_on_ as l is granted or ends
  struct Use {
    double gpus = 0;
    uint64_t memory = 0;
  };
  std::map<std::string, Use> user_use_, group_use_;  // what granted leases hold, for quotas
  FairShare fair_;                                    // what queues hold, and the grant order among them
  void account(const Lease& l, int sign);             // adds (+1) or removes (-1) a granted lease's shares
  uint64_t asksMemory(const LeaseRequest& r, double p = 0) const;  // memory per GPU a request counts against quotas
  // Preemption (preemption.cpp): whether a request stays within its queue's guarantee; notice to enough
  // borrowing leases to make room for `l` (returns how many have notice for it); ending those whose grace
  // ran out (or withdrawing the notice).
  bool withinGuarantee(const Lease& l) const;
  int preemptFor(const Lease& l, int64_t now);
  void revokePreempted(int64_t now);
  // Time limits (time_limits.cpp): notice to granted leases within preemption_grace of their limit, and
  // the end of those that reached it.
  void limitTimes(int64_t now);
  static std::optional<std::string> exceedsMaxTime(const Pool& pool, const LeaseRequest& r);  // why, if it does
  // Idle leases (idle_leases.cpp): a server's count of a lease's kernels (a rise is activity), and the end
  // of granted leases on whose GPUs none ran for their pool's idle_timeout.
  static void noteLaunches(Lease& l, const std::string& server, double launches, int64_t now);
  void reclaimIdle(int64_t now);
  // Moves (moves.cpp): where a pool allows them and nothing of it waits, notice to restartable leases of
  // known kinds on a type much slower for them than one with room now (kMovePrefix in preempted_for).
  void planMoves(int64_t now);
  double speedOn(const Lease& l) const;  // its kind's relative speed where it runs (the slowest share)
  // The pool's order (Policy Order): where a request stands within its priority class (Lease::order_key):
  // its value in the order, behind every request a round chose where the pool has rounds.
  double orderKey(const Lease& l) const;
  double orderValue(const Lease& l) const;  // by the order alone
  static std::string jobOf(const Lease& l);  // whose attained service a lease with a job counts to (user/job)
  void enqueue(Lease& l);  // into the wait queue, at queuePlace
  // Where a queued lease stands: the type and place its pool's round chose for its job, else ("", orderKey).
  std::pair<std::string, double> queuePlace(const Lease& l) const;
  struct Attained {
    double seconds = 0;  // GPU time held (fractions × seconds), at its speed there where heterogeneity is aware
    int64_t last_ms = 0;                     // when it was last charged or seen in a round
    int64_t first_ms = 0;                    // when a round first saw the job (0: none has)
    std::map<std::string, double> on_type;   // wall seconds it ran on each GPU type (max-min rounds)
  };
  void chargeAttained(Lease& l, int64_t now);  // counts a granted lease's service up to now
  Attained& attainedOf(const std::string& job, int64_t now);  // the job's record, seen now
  // Rounds (rounds.cpp): for each pool with rounds whose round is due, which jobs run this round and
  // where; notice to running ones that lose their place (kRoundPrefix), the chosen queued ones first in
  // the order and kept to their type (Lease::round_type).
  void planRounds(int64_t now);
  void planRound(const Pool& pool, int64_t now);
  std::vector<RoundJob> roundCandidates(const Pool& pool, int64_t now, std::map<std::string, double>& capacity);
  void chooseByOrder(const Pool& pool, std::vector<RoundJob>& jobs, const std::vector<double>& capacity);
  void chooseByMaxMin(const Pool& pool, std::vector<RoundJob>& jobs, const std::vector<std::string>& types,
                      const std::vector<double>& capacity, int64_t now);
  void applyRound(const Pool& pool, std::vector<RoundJob>& jobs, const std::vector<std::string>& types, int64_t now);
  std::map<std::string, int64_t> next_round_;  // pool → when its next round is due
  struct RoundChoice {
    std::string pool, type;
    int pick = 0;  // its place among the chosen
  };
  // job → where its pool's last round runs it: a job preempted to move comes back as a new request, which
  // takes the choice made for its job.
  std::map<std::string, RoundChoice> round_choice_;
  std::map<std::string, Attained> attained_;  // job → service it has had (forgotten a day after its last lease)
  std::deque<std::pair<int64_t, std::string>> attained_at_;  // (when, job) each was charged, for prune()
};

}  // namespace gpool::allocator
