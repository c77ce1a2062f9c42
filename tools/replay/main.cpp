// gpool-replay: replays a job trace through the allocator's scheduler on a virtual clock and reports what
// users would have seen (docs/scheduling.md).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>

#include "policy.h"
#include "replay.h"
#include "trace.h"

using namespace gpool::replay;

namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeCsv(const std::string& path, const std::vector<JobResult>& results) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out.precision(12);
  out << "job,arrival_s,start_s,finish_s,isolated_s,gpu_seconds,work_seconds,preemptions\n";
  for (const auto& r : results)
    out << r.id << "," << r.arrival_s << "," << r.start_s << "," << r.finish_s << "," << r.isolated_s << "," << r.gpu_seconds
        << "," << r.work_seconds << "," << r.preemptions << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpool-replay: replay a job trace through gpool's scheduler on a virtual clock, checking the "
               "allocator's invariants at every step, and print one row of figures (docs/scheduling.md)"};
  std::string trace_path, policy_path, csv, label;
  bool whole = false, header = false;
  double restart_s = 60;
  app.add_option("trace", trace_path, "the trace (JSON; tools/replay/make_trace.py writes them)")->required();
  app.add_option("--policy", policy_path, "the allocator policy to replay under (TOML, docs/admin.md; default: the defaults)");
  app.add_flag("--whole-gpus", whole, "every job asks for whole GPUs, whatever fraction its trace says");
  app.add_option("--restart", restart_s, "seconds a preempted or moved job spends restarting, without progress")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--csv", csv, "also write each job's figures to this file");
  app.add_option("--label", label, "the row's name (default: the policy file's name)");
  app.add_flag("--header", header, "print the table's header first");
  bool learn = false;
  app.add_flag("--learn", learn,
               "do not give the scheduler the trace's job kinds as its table: it learns them from the jobs' progress "
               "reports (a policy's own [job_kinds] still counts)");
  std::string window;
  app.add_option("--window", window,
                 "report only jobs FROM to TO-1 in arrival order (FROM:TO), as Gavel measures a steady state; all are "
                 "replayed and checked")
      ->check([](const std::string& w) {
        size_t from = 0, to = 0;
        char colon = 0;
        std::istringstream in(w);
        return (in >> from >> colon >> to) && colon == ':' && from < to && in.eof() ? "" : "must be FROM:TO with FROM < TO";
      });
  CLI11_PARSE(app, argc, argv);
  try {
    Trace trace = loadTrace(trace_path);
    gpool::allocator::Policy policy = policy_path.empty() ? gpool::allocator::Policy{} : gpool::allocator::parsePolicy(readFile(policy_path));
    auto t0 = std::chrono::steady_clock::now();
    Replay replay(trace, policy, {whole, restart_s, learn});
    std::vector<JobResult> results = replay.run();
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!csv.empty()) writeCsv(csv, results);
    if (!window.empty()) {
      size_t from = std::stoul(window), to = std::stoul(window.substr(window.find(':') + 1));
      if (to > results.size()) throw std::runtime_error("--window " + window + ": the trace has " + std::to_string(results.size()) + " jobs");
      results = std::vector<JobResult>(results.begin() + static_cast<std::ptrdiff_t>(from), results.begin() + static_cast<std::ptrdiff_t>(to));
    }
    int gpus = std::accumulate(trace.cluster.begin(), trace.cluster.end(), 0, [](int a, const auto& kv) { return a + kv.second; });
    Summary s = summarize(results, gpus);
    if (label.empty()) label = std::string(policy_path.empty() ? "defaults" : policy_path) + (whole ? " (whole GPUs)" : "");
    if (header)
      std::printf("| run | jobs | avg JCT (h) | p99 JCT (h) | makespan (h) | GPUs used / allocated | avg queueing (h) | Jain's index | preemptions | replay time (s) |\n"
                  "|---|---|---|---|---|---|---|---|---|---|\n");
    std::printf("| %s | %zu | %.2f | %.2f | %.1f | %.1f%% / %.1f%% | %.2f | %.3f | %d | %.1f |\n", label.c_str(), s.jobs, s.avg_jct_h,
                s.p99_jct_h, s.makespan_h, 100 * s.utilization, 100 * s.allocated, s.avg_queueing_h, s.jain, s.preemptions, wall);
    return 0;
  } catch (const InvariantError& e) {
    std::fprintf(stderr, "gpool-replay: invariant broken: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpool-replay: %s\n", e.what());
    return 2;
  }
}
