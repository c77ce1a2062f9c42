// gpool-replay's engine: drives the allocator's real Scheduler through a job trace on a virtual clock (no
// sleeping, no HTTP). Jobs arrive and ask for GPUs; a granted job runs at its kind's throughput on the
// GPU type it got (the slowest of its shares) until its steps are done, then releases its lease; a
// preempted one keeps what it did and asks again. Every step checks the allocator's invariants.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "policy.h"
#include "scheduler.h"
#include "trace.h"

namespace gpool::replay {

class InvariantError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct JobResult {
  std::string id;
  double arrival_s = 0, start_s = -1, finish_s = -1;
  double isolated_s = 0;    // its work alone on the fastest type for it
  double gpu_seconds = 0;   // fractions of GPUs held × time
  double work_seconds = 0;  // fractions of GPUs it asked for (and uses) × time: less where it held whole GPUs
  int preemptions = 0;
};

struct ReplayOptions {
  bool whole_gpus = false;  // every job asks for whole GPUs (p = 1), whatever its trace says
  double restart_s = 60;    // a preempted (or moved) job's restart makes no progress for this long
  // The scheduler is not given the trace's kinds as its [job_kinds] table: it learns them from the jobs'
  // progress, which every running job reports at every event (as gpool run's heartbeats carry it).
  bool learn = false;
};

class Replay {
 public:
  Replay(const Trace& trace, allocator::Policy policy, ReplayOptions options = {});
  // Runs the trace to its end; throws InvariantError when the allocator breaks one.
  std::vector<JobResult> run();
  int64_t steps() const { return steps_; }  // events handled

 private:
  struct Running {
    size_t job;
    double rate = 0;         // steps per second where it runs
    int64_t since_ms = 0;    // progress from here (a restart first spends restart_s)
    int64_t held_ms = 0;     // granted at
    double fraction = 0;     // of GPUs held, summed over its shares
    double uses = 0;         // of GPUs it uses: n × the fraction it asked for
    int64_t done_ms = 0;     // when its work is done, if it keeps running
  };
  void arrive(size_t job);
  void absorb();                   // starts what the allocator granted, requeues what it preempted
  void start(const allocator::Lease& l);
  void stop(const std::string& lease, bool done);
  double rateOf(const allocator::Lease& l, const TraceJob& job) const;
  void check() const;              // the invariants (InvariantError)
  void reportProgress();           // every running job's progress in its current run (ReplayOptions::learn)
  int64_t nextEvent(size_t next_arrival);

  const Trace& trace_;
  ReplayOptions options_;
  int64_t now_ms_ = 0;
  allocator::Scheduler sched_;
  std::vector<JobResult> results_;
  std::vector<double> remaining_;                 // steps, by job
  std::vector<int> attempts_;                     // requests made, by job
  std::map<std::string, size_t> job_of_;          // lease id → job
  std::map<std::string, Running> running_;        // granted leases' jobs
  std::set<std::pair<int64_t, std::string>> done_at_;  // (when, lease) a running job's work is done
  std::set<int64_t> wakes_;                        // preemption deadlines to tick at
  int64_t steps_ = 0;
};

struct Summary {
  size_t jobs = 0;
  double avg_jct_h = 0, p99_jct_h = 0, makespan_h = 0, avg_queueing_h = 0, jain = 0;
  double utilization = 0;  // of the GPUs' capacity over the makespan, by what jobs use
  double allocated = 0;    // ... by what leases hold
  int preemptions = 0;
};
// Jain's index is taken over each job's isolated time / its completion time (1: all slowed alike).
Summary summarize(const std::vector<JobResult>& results, int gpus);

}  // namespace gpool::replay
