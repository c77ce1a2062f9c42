// gpool-allocator's /metrics (Prometheus text): its connections and clients' CPU, whether it leads, and
// where it leads, GPUs, leases, requests and their decisions, queues, users and store writes.
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "gpool/printable.h"
#include "service.h"

namespace gpool::allocator {

using nlohmann::json;

namespace {

// Upper bounds of gpool_grant_decision_seconds' buckets (one more bucket past the last: +Inf).
constexpr double kBuckets[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0};

}  // namespace

void Service::metrics(const httplib::Request&, httplib::Response& res) {
  std::ostringstream o;
  connectionMetrics(o);
  if (leading_) {
    std::lock_guard lock(mu_);
    leaseMetrics(o);
    decisionMetrics(o);
    queueMetrics(o);
    userMetrics(o);
    o << "# HELP gpool_store_transactions_total Store transactions written (each holds the changes of one request or more).\n"
      << "# TYPE gpool_store_transactions_total counter\ngpool_store_transactions_total " << commits_->transactions() << "\n"
      << "# HELP gpool_store_changes_total Changes (requests, ticks) written to the store.\n"
      << "# TYPE gpool_store_changes_total counter\ngpool_store_changes_total " << commits_->changesWritten() << "\n";
  }
  res.set_content(o.str(), "text/plain; version=0.0.4");
}

// What the listeners refused and held back, and each client's share of the CPU: a standby's too.
void Service::connectionMetrics(std::ostream& o) const {
  o << "# HELP gpool_allocator_leader Whether this allocator decides (1), or stands by for another replica (0).\n"
    << "# TYPE gpool_allocator_leader gauge\ngpool_allocator_leader " << (leading_ ? 1 : 0) << "\n"
    << "# HELP gpool_allocator_connections_refused_total Connections closed unserved, by reason: their address "
       "(or local user) held its share already (address: --max-connections-per-address), a TLS handshake or "
       "request did not arrive whole in time or its answer was not taken in time (slow), every connection was held and it gave "
       "its place to a new one while it waited (displaced), or its answer was dropped, unread, with more bytes of answers "
       "unread than --max-unread-answers (unread).\n# TYPE gpool_allocator_connections_refused_total counter\n"
    << "gpool_allocator_connections_refused_total{reason=\"address\"} " << peers_->refused + (local_ ? local_->peers().refused.load() : 0) << "\n"
    << "gpool_allocator_connections_refused_total{reason=\"slow\"} " << peers_->cut_off + (local_ ? local_->peers().cut_off.load() : 0) << "\n"
    << "gpool_allocator_connections_refused_total{reason=\"displaced\"} " << (tcp_ ? tcp_->displaced() : 0) + (local_ ? local_->displaced() : 0) << "\n"
    << "gpool_allocator_connections_refused_total{reason=\"unread\"} " << (tcp_ ? tcp_->dropped() : 0) + (local_ ? local_->dropped() : 0) << "\n"
    << "# HELP gpool_allocator_requests_held_total Requests (and TLS handshake steps) that waited, whole, for their "
       "client's share of the allocator's CPU (--max-client-cpu).\n# TYPE gpool_allocator_requests_held_total counter\n"
    << "gpool_allocator_requests_held_total " << (tcp_ ? tcp_->heldBack() : 0) + (local_ ? local_->heldBack() : 0) << "\n"
    << "# HELP gpool_allocator_clients_asking Clients (addresses, local users) still paying back the allocator's CPU "
       "they spent, or with a request being answered: those that split --max-client-cpu-total.\n"
       "# TYPE gpool_allocator_clients_asking gauge\n"
    << "gpool_allocator_clients_asking " << (client_cpu_ ? client_cpu_->clients() : 0) << "\n"
    << "# HELP gpool_allocator_client_cpu_share Of one CPU, each client's share of the allocator's CPU now: "
       "--max-client-cpu, or less with more clients asking than --max-client-cpu-total gives that much (0: no limit).\n"
       "# TYPE gpool_allocator_client_cpu_share gauge\n"
    << "gpool_allocator_client_cpu_share " << (client_cpu_ ? client_cpu_->shareNow() : 0) << "\n";
}

// GPUs, shares and requests (mu_ held).
void Service::leaseMetrics(std::ostream& o) const {
  size_t gpus = 0, up = 0, shares = 0;
  double used = 0;
  for (const auto& [name, srv] : sched_->servers()) {
    gpus += srv.gpus.size();
    if (srv.up && !srv.drain) up += srv.gpus.size();
    for (const auto& g : srv.gpus) used += g.used_fraction;
  }
  for (const auto& [id, l] : sched_->live())
    if (l->state == LeaseState::kGranted) shares += l->shares.size();
  o << "# HELP gpool_gpus GPUs registered.\n# TYPE gpool_gpus gauge\ngpool_gpus " << gpus << "\n"
    << "# HELP gpool_gpus_available GPUs on servers that are up and not drained.\n# TYPE gpool_gpus_available gauge\n"
    << "gpool_gpus_available " << up << "\n"
    << "# HELP gpool_gpu_fraction_in_use Sum of the fractions of GPUs leased.\n# TYPE gpool_gpu_fraction_in_use gauge\n"
    << "gpool_gpu_fraction_in_use " << used << "\n"
    << "# HELP gpool_shares_in_use Shares (one GPU or fraction each) held by leases.\n# TYPE gpool_shares_in_use gauge\n"
    << "gpool_shares_in_use " << shares << "\n"
    << "# HELP gpool_queue_length Requests waiting.\n# TYPE gpool_queue_length gauge\n"
    << "gpool_queue_length " << sched_->queued() << "\n"
    << "# HELP gpool_lease_requests_total Lease requests, by outcome.\n# TYPE gpool_lease_requests_total counter\n"
    << "gpool_lease_requests_total{outcome=\"granted\"} " << grants_ << "\n"
    << "gpool_lease_requests_total{outcome=\"queued\"} " << queued_ << "\n"
    << "gpool_lease_requests_total{outcome=\"refused\"} " << refusals_ << "\n"
    << "# HELP gpool_leases_preempted_total Leases revoked to give a queue its guarantee back.\n"
    << "# TYPE gpool_leases_preempted_total counter\n"
    << "gpool_leases_preempted_total " << sched_->preempted() << "\n"
    << "# HELP gpool_leases_moved_total Leases revoked to move their jobs to a faster GPU type (moves_per_hour).\n"
    << "# TYPE gpool_leases_moved_total counter\n"
    << "gpool_leases_moved_total " << sched_->moved() << "\n"
    << "# HELP gpool_leases_rotated_total Notices given by pools' rounds (round, order max-min): other jobs' turn, or a move to another GPU type.\n"
    << "# TYPE gpool_leases_rotated_total counter\n"
    << "gpool_leases_rotated_total " << sched_->rotated() << "\n"
    << "# HELP gpool_leases_time_limited_total Leases ended at their time limit (gpool run --time, a pool's max_time).\n"
    << "# TYPE gpool_leases_time_limited_total counter\n"
    << "gpool_leases_time_limited_total " << sched_->timeLimited() << "\n"
    << "# HELP gpool_leases_reclaimed_idle_total Leases ended because no kernel ran on their GPUs for their pool's idle_timeout.\n"
    << "# TYPE gpool_leases_reclaimed_idle_total counter\n"
    << "gpool_leases_reclaimed_idle_total " << sched_->reclaimedIdle() << "\n";
}

// A grant, queue or refusal decision took `seconds` (mu_ held).
void Service::recordDecision(double seconds) {
  static_assert(std::size(kBuckets) + 1 == std::tuple_size_v<decltype(decision_buckets_)>);
  decision_seconds_[decision_next_++ % decision_seconds_.size()] = seconds;
  decision_sum_ += seconds;
  ++decision_count_;
  size_t b = 0;
  while (b < std::size(kBuckets) && seconds > kBuckets[b]) ++b;
  ++decision_buckets_[b];
}

// The decisions' histogram, and quantiles of the recent ones (mu_ held).
void Service::decisionMetrics(std::ostream& o) const {
  o << "# HELP gpool_grant_decision_seconds Time to grant, queue or refuse a request (without the store write its answer then waits for).\n"
    << "# TYPE gpool_grant_decision_seconds histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < std::size(kBuckets); ++i) {
    cum += decision_buckets_[i];
    o << "gpool_grant_decision_seconds_bucket{le=\"" << kBuckets[i] << "\"} " << cum << "\n";
  }
  cum += decision_buckets_[std::size(kBuckets)];
  o << "gpool_grant_decision_seconds_bucket{le=\"+Inf\"} " << cum << "\n"
    << "gpool_grant_decision_seconds_sum " << decision_sum_ << "\n"
    << "gpool_grant_decision_seconds_count " << decision_count_ << "\n";
  std::vector<double> recent(decision_seconds_.begin(),
                             decision_seconds_.begin() + static_cast<long>(std::min<size_t>(decision_count_, decision_seconds_.size())));
  std::sort(recent.begin(), recent.end());
  o << "# HELP gpool_grant_decision_recent_seconds Quantiles of the last 4096 decisions.\n"
    << "# TYPE gpool_grant_decision_recent_seconds gauge\n";
  for (double q : {0.5, 0.99, 0.999})
    if (!recent.empty())
      o << "gpool_grant_decision_recent_seconds{quantile=\"" << q << "\"} "
        << recent[std::min(recent.size() - 1, static_cast<size_t>(q * static_cast<double>(recent.size())))] << "\n";
}

// The queues' gauges, from what /v1/status shows of them. With mu_ held.
void Service::queueMetrics(std::ostream& o) const {
  json queues = queuesJson();
  if (queues.empty()) return;
  for (const auto& [key, help] : {std::pair{"guarantee_gpus", "GPUs guaranteed to the queue."},
                                  std::pair{"held_gpus", "GPUs (sums of fractions) the queue's leases hold."},
                                  std::pair{"borrowed_gpus", "GPUs the queue holds beyond its guarantee."},
                                  std::pair{"waiting", "Requests of the queue's members that wait."}}) {
    std::string name = std::string("gpool_queue_") + key;
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n";
    for (const auto& q : queues) o << name << "{queue=\"" << q["name"].get<std::string>() << "\"} " << q[key].dump() << "\n";
  }
}

// Per user, over their granted leases: GPUs held, and what the leases' servers measured of them (heartbeats'
// `use`). Gauges: a lease that ends leaves the sums.
void Service::userMetrics(std::ostream& o) const {
  struct Sums {
    double gpus = 0, memory = 0, device_s = 0, held_s = 0;
  };
  std::map<std::string, Sums> users;
  for (const auto& [id, l] : sched_->live()) {
    if (l->state != LeaseState::kGranted) continue;
    Sums& u = users[l->req.user];
    u.gpus += l->heldGpus();
    const Lease::Use use = l->used();
    u.memory += use.memory, u.device_s += use.device_s, u.held_s += use.held_s;
  }
  for (auto [name, help, field] : {std::tuple{"gpool_user_gpus", "GPUs (sums of fractions) the user's leases hold.", &Sums::gpus},
                                   std::tuple{"gpool_user_memory_bytes", "Device memory the user's leases hold, as their servers measure it.", &Sums::memory},
                                   std::tuple{"gpool_user_device_seconds", "Device time the kernels of the user's live leases took (shares below a whole GPU).", &Sums::device_s},
                                   std::tuple{"gpool_user_held_back_seconds", "Time the launches of the user's live leases waited for their shares.", &Sums::held_s}}) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n";
    const auto was = o.precision(15);  // (bytes and seconds: more than the stream's 6 digits)
    for (const auto& [user, sums] : users) o << name << "{user=\"" << gpool::metricLabel(user) << "\"} " << sums.*field << "\n";
    o.precision(was);
  }
}

}  // namespace gpool::allocator
