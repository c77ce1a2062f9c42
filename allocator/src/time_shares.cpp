// Dividing GPU types' time among jobs (time_shares.h), with COIN-OR Clp (Debian: coinor-libclp-dev).
#include "time_shares.h"

#include <Clp_C_Interface.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <numeric>

namespace gpool::allocator {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A linear program built column by column (Clp's column-major form), maximized.
class Program {
 public:
  // Rows first, with their bounds.
  int row(double lower, double upper) {
    row_lower_.push_back(lower);
    row_upper_.push_back(upper);
    return static_cast<int>(row_lower_.size()) - 1;
  }
  int column(double lower, double upper, double objective, const std::vector<std::pair<int, double>>& entries) {
    starts_.push_back(static_cast<CoinBigIndex>(rows_.size()));
    for (const auto& [r, v] : entries) rows_.push_back(r), values_.push_back(v);
    col_lower_.push_back(lower);
    col_upper_.push_back(upper);
    objective_.push_back(objective);
    return static_cast<int>(col_lower_.size()) - 1;
  }
  // Solves; false when Clp proves no optimum. The solution is by column.
  bool solve() {
    if (!model_) {
      model_.reset(Clp_newModel());
      Clp_setLogLevel(model_.get(), 0);
      std::vector<CoinBigIndex> starts = starts_;
      starts.push_back(static_cast<CoinBigIndex>(rows_.size()));
      Clp_loadProblem(model_.get(), static_cast<int>(col_lower_.size()), static_cast<int>(row_lower_.size()), starts.data(),
                      rows_.data(), values_.data(), col_lower_.data(), col_upper_.data(), objective_.data(), row_lower_.data(),
                      row_upper_.data());
      Clp_setObjSense(model_.get(), -1);  // maximize
    } else {
      Clp_chgColumnLower(model_.get(), col_lower_.data());
      Clp_chgObjCoefficients(model_.get(), objective_.data());
    }
    Clp_setMaximumSeconds(model_.get(), 5);  // the allocator's lock is held: never long
    Clp_initialSolve(model_.get());
    if (!Clp_isProvenOptimal(model_.get())) return false;
    const double* x = Clp_getColSolution(model_.get());
    solution_.assign(x, x + col_lower_.size());
    return true;
  }
  double value(int column) const { return solution_.at(static_cast<size_t>(column)); }
  // A second objective over the same rows (after a solve).
  void setLower(int column, double lower) { col_lower_.at(static_cast<size_t>(column)) = lower; }
  void setObjective(std::vector<double> objective) { objective_ = std::move(objective); }
  size_t columns() const { return col_lower_.size(); }

 private:
  struct Free {
    void operator()(Clp_Simplex* m) const { Clp_deleteModel(m); }
  };
  std::vector<double> row_lower_, row_upper_, col_lower_, col_upper_, objective_, values_, solution_;
  std::vector<CoinBigIndex> starts_;
  std::vector<int> rows_;
  std::unique_ptr<Clp_Simplex, Free> model_;
};

struct Var {
  size_t job, type;
  int column;
};

}  // namespace

namespace {

// maxMinShares over classes of alike jobs (the same size and speeds), `count` jobs each: each job of a
// class has the same share (the program is convex and symmetric in alike jobs, so some optimum is), so
// the program grows with the kinds of jobs, not their number.
std::vector<std::vector<double>> maxMinByClass(const std::vector<ShareJob>& classes, const std::vector<double>& count,
                                               const std::vector<double>& capacity) {
  const size_t types = capacity.size();
  std::vector<std::vector<double>> x(classes.size(), std::vector<double>(types, 0.0));
  const double total = std::accumulate(capacity.begin(), capacity.end(), 0.0);
  double demand = 0;
  for (size_t k = 0; k < classes.size(); ++k) demand += classes[k].gpus * count[k];
  if (classes.empty() || total <= 0) return x;
  Program lp;
  std::vector<int> fair(classes.size(), -1), time(classes.size(), -1), type_row(types);
  std::vector<double> equal(classes.size(), 0.0);  // what an equal share of every type gives each job
  for (size_t k = 0; k < classes.size(); ++k) {
    for (size_t t = 0; t < types; ++t) equal[k] += classes[k].speed.at(t) * capacity[t] / std::max(total, demand);
    if (equal[k] <= 0 || classes[k].gpus <= 0) continue;  // it can run nowhere: no share
    fair[k] = lp.row(0, kInf);  // its normalized throughput - z >= 0
    time[k] = lp.row(0, 1);     // it runs at most all the time
  }
  for (size_t t = 0; t < types; ++t) type_row[t] = lp.row(0, std::max(0.0, capacity[t]));
  std::vector<Var> vars;
  std::vector<double> throughput_objective;
  for (size_t k = 0; k < classes.size(); ++k) {
    for (size_t t = 0; t < types && fair[k] >= 0; ++t) {
      if (classes[k].speed[t] <= 0) continue;
      const double a = classes[k].speed[t] / equal[k];
      vars.push_back({k, t, lp.column(0, 1, 0, {{fair[k], a}, {time[k], 1}, {type_row[t], classes[k].gpus * count[k]}})});
      throughput_objective.push_back(a * count[k]);
    }
  }
  std::vector<std::pair<int, double>> z_entries;
  for (int r : fair)
    if (r >= 0) z_entries.push_back({r, -1});
  const int z = lp.column(0, kInf, 1, z_entries);
  if (vars.empty() || !lp.solve()) return x;
  // Then the most throughput that keeps the least share (a hair below it: Clp's tolerances).
  lp.setLower(z, lp.value(z) * (1 - 1e-6));
  throughput_objective.push_back(0);  // z
  lp.setObjective(throughput_objective);
  if (!lp.solve()) return x;
  for (const Var& v : vars) x[v.job][v.type] = std::clamp(lp.value(v.column), 0.0, 1.0);
  return x;
}

}  // namespace

std::vector<std::vector<double>> maxMinShares(const std::vector<ShareJob>& jobs, const std::vector<double>& capacity) {
  std::map<std::pair<double, std::vector<double>>, size_t> class_of;
  std::vector<ShareJob> classes;
  std::vector<double> count;
  std::vector<size_t> member(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    auto [it, fresh] = class_of.try_emplace({jobs[j].gpus, jobs[j].speed}, classes.size());
    if (fresh) classes.push_back(jobs[j]), count.push_back(0);
    count[it->second] += 1;
    member[j] = it->second;
  }
  std::vector<std::vector<double>> by_class = maxMinByClass(classes, count, capacity), x;
  for (size_t j = 0; j < jobs.size(); ++j) x.push_back(by_class[member[j]]);
  return x;
}

std::vector<int> fastestTypes(const std::vector<ShareJob>& jobs, const std::vector<double>& capacity) {
  const size_t types = capacity.size();
  std::vector<int> chosen(jobs.size(), -1);
  if (jobs.empty()) return chosen;
  // Running counts for more than any speed: every job that can runs, then each where it is fastest
  // (against its own fastest type, so no job's unit of throughput outweighs another's).
  constexpr double kRunning = 2;
  Program lp;
  std::vector<int> time(jobs.size()), type_row(types);
  for (size_t j = 0; j < jobs.size(); ++j) time[j] = lp.row(0, 1);
  for (size_t t = 0; t < types; ++t) type_row[t] = lp.row(0, std::max(0.0, capacity[t]));
  std::vector<Var> vars;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const double best = *std::max_element(jobs[j].speed.begin(), jobs[j].speed.end());
    for (size_t t = 0; t < types && best > 0; ++t)
      if (jobs[j].speed[t] > 0)
        vars.push_back({j, t, lp.column(0, 1, jobs[j].gpus * (kRunning + jobs[j].speed[t] / best), {{time[j], 1}, {type_row[t], jobs[j].gpus}})});
  }
  std::vector<std::vector<double>> x(jobs.size(), std::vector<double>(types, 0.0));
  if (!vars.empty() && lp.solve())
    for (const Var& v : vars) x[v.job][v.type] = lp.value(v.column);
  // The program's answer is whole where the jobs' sizes are alike; otherwise each job takes the type it got
  // most of, where room is left, then any with room, fastest first.
  std::vector<double> left = capacity;
  auto take = [&](size_t j, size_t t) {
    if (jobs[j].speed[t] <= 0 || left[t] + 1e-9 < jobs[j].gpus) return false;
    left[t] -= jobs[j].gpus;
    chosen[j] = static_cast<int>(t);
    return true;
  };
  for (size_t j = 0; j < jobs.size(); ++j) {
    size_t most = static_cast<size_t>(std::max_element(x[j].begin(), x[j].end()) - x[j].begin());
    if (x[j][most] > 0.5) take(j, most);
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (chosen[j] >= 0) continue;
    std::vector<size_t> order(types);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return jobs[j].speed[a] > jobs[j].speed[b]; });
    for (size_t t : order)
      if (take(j, t)) break;
  }
  return chosen;
}

}  // namespace gpool::allocator
