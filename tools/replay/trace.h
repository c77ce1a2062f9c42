// A job trace for gpool-replay (docs/scheduling.md): the cluster (GPUs of each type), the job kinds with
// their throughput on each GPU type, and the jobs: when each arrives, what it asks for (GPUs, fraction,
// acceptable types) and how much work it is, in steps of its kind.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpool::replay {

class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TraceJob {
  std::string id, kind, user = "user";
  double arrival_s = 0;
  int n = 1;
  double p = 1.0;             // fraction of each GPU it asks for
  double steps = 0;           // its work, in steps of its kind
  std::vector<std::string> types;  // GPU types it may run on (empty: any)
  bool preemptible = true;
};

struct Trace {
  std::map<std::string, int> cluster;  // GPU type → how many GPUs
  int gpus_per_server = 4;
  std::map<std::string, std::map<std::string, double>> kinds;  // kind → GPU type → steps per second on a whole GPU
  std::vector<TraceJob> jobs;  // by arrival

  // Steps per second of `kind` on a GPU of `type` (0: it cannot run there).
  double rate(const std::string& kind, const std::string& type) const;
  // The fastest it runs on any type of the cluster.
  double bestRate(const std::string& kind) const;
};

// Reads and checks a trace (JSON, docs/scheduling.md); throws TraceError naming the problem.
Trace loadTrace(const std::string& path);

}  // namespace gpool::replay
