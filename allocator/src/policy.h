// Admin partition policy: pools of servers with the fractions they offer, isolation and placement,
// priority classes, per-user and per-group quotas, and the lease/heartbeat timings. Read from TOML (a
// file at start, or the API at run time); every error names the key and what is expected.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpool/allocator/units.h"

namespace gpool::allocator {

class PolicyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How a pool's GPUs are shared: whole GPUs only; shares as processes beside each other; shares on
// partitions of the GPU's SMs.
enum class Isolation { kExclusive, kProcess, kSpatial };
// Where shares go: the fullest GPU that fits (keeps whole GPUs free), or the emptiest.
enum class Placement { kPack, kSpread };
// Whether placement looks at GPU types' speed for the job (the policy's [job_kinds]): a request of a known
// kind goes to the type where it runs fastest among those with room; or not (any type alike).
enum class Heterogeneity { kAware, kAgnostic };
// The order of a pool's queued requests within a priority class: first come first served; shortest first
// by their estimates (none: after every estimate); least attained service first (the GPU time their jobs
// have had, counted at its speed there where heterogeneity is aware); max-min fairness, Gavel's division of
// each GPU type's time among the jobs (rounds.cpp; always in rounds).
enum class Order { kFifo, kShortestFirst, kLeastAttained, kMaxMin };
const char* orderName(Order o);
const char* heterogeneityName(Heterogeneity h);
const char* isolationName(Isolation i);
const char* placementName(Placement p);

inline constexpr double kDefaultRoundStay = 1.25;  // measured: docs/scheduling.md "Fewer restarts"

struct Pool {
  std::string name;
  std::vector<std::string> servers{"*"};  // server names; "*" matches every server no other pool names
  std::vector<double> fractions{1.0, 0.5, 0.25};
  Isolation isolation = Isolation::kProcess;
  Placement placement = Placement::kPack;
  Heterogeneity heterogeneity = Heterogeneity::kAware;
  Order order = Order::kFifo;
  // Moves to a faster type (heterogeneity aware): at most this many notices per hour (0: none).
  int moves_per_hour = 0;
  // Rounds (rounds.cpp): every `round`, which jobs run, and on which GPU type, is decided again in the
  // pool's order, and restartable jobs that lose their place are preempted (they run again later). 0: no
  // rounds (a running job keeps its GPUs). Order max-min always runs in rounds (6 minutes unless set).
  std::chrono::milliseconds round{0};
  // In rounds, a running job keeps its place (and type) unless another's claim is this many times
  // stronger: under max-min its priority, under least-attained its service (divided by this). Fewer
  // restarts, for a coarser division of time; 1: none (docs/scheduling.md).
  double round_stay = kDefaultRoundStay;
  // Elastic requests (--min-fraction): how long one waits for its whole fraction before it takes a smaller
  // one this pool offers (0: at once); absent ("never"): always the whole fraction.
  std::optional<std::chrono::milliseconds> elastic_after{std::chrono::milliseconds(0)};
  // The longest a lease of this pool runs (time_limits.cpp): the time limit of a request that names none,
  // and the most one may name. 0: no limit.
  std::chrono::milliseconds max_time{0};
  // A granted lease on whose GPUs no kernel ran for this long ends (idle_leases.cpp): its GPUs go to those
  // who wait. 0: never.
  std::chrono::milliseconds idle_timeout{0};
};

struct Quota {
  std::optional<double> gpus;      // sum of fractions held at once
  std::optional<uint64_t> memory;  // bytes held at once
};

// A queue with a guaranteed share (issue 14): requests of its members are granted up to the guarantee
// ahead of anything over its own queue's guarantee; beyond it a queue borrows idle capacity, divided among
// queues by weight; the limit caps what it holds at all. Queues nest (`parent`): a child's guarantee is
// part of its parent's, and a parent's limit caps its children together. A requester belongs to the first
// queue (in the policy's order) that lists them or one of their groups; others are in no queue (no
// guarantee, no limit, weight 1).
struct Queue {
  std::string name, parent;  // parent "": a top-level queue
  Quota guarantee;           // absent: none
  Quota limit;               // absent: none
  double weight = 1.0;
  std::vector<std::string> members;  // user names and @groups
};

// Who may do what beyond their own leases. A member is a user name or "@group".
struct Access {
  std::vector<std::string> admins;  // may read and end any lease, request for others, change policies
  std::map<std::string, std::vector<std::string>> priorities;  // class → who may request it (not listed: anyone)

  static bool isMember(const std::vector<std::string>& members, const std::string& user, const std::vector<std::string>& groups);
  bool isAdmin(const std::string& user, const std::vector<std::string>& groups) const { return isMember(admins, user, groups); }
  bool mayUsePriority(const std::string& cls, const std::string& user, const std::vector<std::string>& groups) const;
};

struct Policy {
  std::vector<Pool> pools{Pool{"default"}};
  std::map<std::string, int> priorities{{"high", 100}, {"normal", 50}, {"low", 10}};
  std::string default_priority = "normal";
  std::map<std::string, Quota> user_quotas, group_quotas;
  std::vector<Queue> queues;  // parents before their children
  // GPU types ([gpu_types]): type name → model patterns (shell globs, any case) of the GPUs of that type.
  std::map<std::string, std::vector<std::string>> gpu_types;
  // Job kinds ([job_kinds]): kind → GPU type → its throughput there (any unit, e.g. steps per second).
  std::map<std::string, std::map<std::string, double>> job_kinds;
  Access access;
  std::chrono::milliseconds lease_ttl{15000};      // a lease ends this long after its last heartbeat
  std::chrono::milliseconds server_timeout{15000}; // a server is down this long after its last heartbeat
  std::chrono::milliseconds token_ttl{600000};     // how long a lease token admits a connection
  // How often a lease's holder heartbeats it: three times per lease_ttl, and four times per token_ttl,
  // since the heartbeats renew its tokens once half their life has passed (Scheduler::renewTokens): the
  // renewal comes at least a quarter of token_ttl before they expire, however late one beat is by less.
  std::chrono::milliseconds leaseHeartbeat() const { return std::min(lease_ttl / 3, token_ttl / 4); }
  std::chrono::milliseconds preemption_grace{30000};  // notice a preempted lease gets before its share is revoked
  std::chrono::milliseconds ended_lease_retention{std::chrono::hours(24 * 7)};  // ended leases then leave the database
  std::string source;                              // the TOML text it was read from ("" = defaults)
  // What the admin should know of a policy that is valid: a setting gpool takes but does not yet enforce.
  std::vector<std::string> notes;

  // The pool a server belongs to: the first naming it, else the first with "*", else none.
  const Pool* poolOfServer(const std::string& server) const;
  const Pool* pool(const std::string& name) const;
  // The type of a GPU model: the first type in gpu_types with a pattern the model matches, else the family
  // the model's name says ("NVIDIA H100 80GB HBM3" → "H100", "Tesla V100-SXM2-16GB" → "V100").
  std::string gpuTypeOf(const std::string& model) const;
  // How fast a job of `kind` runs on `type`, against the fastest type the table names for it (0 to 1): 1
  // for a kind or a type the table does not know (nothing known, nothing preferred), 0 where it names a
  // throughput of 0 (it cannot run there).
  double relativeSpeed(const std::string& kind, const std::string& type) const;
  // The queue of a requester (see Queue), or null.
  const Queue* queueOf(const std::string& user, const std::vector<std::string>& groups) const;
};

// Parses and checks a policy; throws PolicyError naming the problem.
Policy parsePolicy(const std::string& toml_text);
// The policy text `source` with queue `name` changed at run time (gpool admin queue): the keys of the
// TOML table `changes` set on it (the queue is made when new), or, with no changes, the queue removed.
// Throws PolicyError; parse the result to check it. Comments in `source` are not kept.
std::string withQueue(const std::string& source, const std::string& name, const std::string* changes);

}  // namespace gpool::allocator
