// How a pool's GPU types' time is divided among its jobs (issue 15), for the round-based policies
// (rounds.cpp). Pure functions over numbers: linear programs solved with COIN-OR Clp.
#pragma once

#include <vector>

namespace gpool::allocator {

struct ShareJob {
  double gpus = 1;             // what it holds while it runs: n × its fraction
  std::vector<double> speed;   // by type: its throughput there (any unit; 0: it cannot run there)
};

// Gavel's max-min fairness (OSDI 2020, section 4.1): X[j][t], the fraction of time job j should run on
// type t, maximizing the least of the jobs' normalized throughputs, sum_t X[j][t] speed[j][t] over what an
// equal share of every type would give it; then, with that least kept, the sum of them (no capacity is
// left idle that some job could use). Each job runs at most all the time (sum_t X[j][t] <= 1), and no
// type gives more than it has (sum_j gpus[j] X[j][t] <= capacity[t], in GPUs).
// With every speed that is not 0 set to 1, this is the heterogeneity-agnostic form: equal time. Alike jobs
// (the same size and speeds) get alike shares: the program is solved over the kinds of jobs.
std::vector<std::vector<double>> maxMinShares(const std::vector<ShareJob>& jobs, const std::vector<double>& capacity);

// The type each job should run on (-1: none has room for it) to make the sum of gpus[j] × speed[j][t]
// the largest, where every job runs (it is given a type wherever capacity allows). For a set of jobs
// already chosen to run.
std::vector<int> fastestTypes(const std::vector<ShareJob>& jobs, const std::vector<double>& capacity);

}  // namespace gpool::allocator
