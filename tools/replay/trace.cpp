// Reading a trace (trace.h).
#include "trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace gpool::replay {

using nlohmann::json;

double Trace::rate(const std::string& kind, const std::string& type) const {
  auto k = kinds.find(kind);
  if (k == kinds.end()) return 0;
  auto r = k->second.find(type);
  return r == k->second.end() ? 0 : r->second;
}

double Trace::bestRate(const std::string& kind) const {
  double best = 0;
  for (const auto& [type, count] : cluster) best = std::max(best, rate(kind, type));
  return best;
}

namespace {

TraceJob jobFrom(const json& j, const Trace& t) {
  TraceJob job;
  job.id = j.at("id").get<std::string>();
  job.kind = j.at("kind").get<std::string>();
  job.arrival_s = j.at("arrival_s").get<double>();
  job.n = j.value("n", 1);
  job.p = j.value("p", 1.0);
  job.steps = j.at("steps").get<double>();
  job.user = j.value("user", std::string("user"));
  job.types = j.value("types", std::vector<std::string>{});
  job.preemptible = j.value("preemptible", true);
  std::string where = "job " + job.id + ": ";
  if (!t.kinds.count(job.kind)) throw TraceError(where + "unknown kind '" + job.kind + "'");
  if (t.bestRate(job.kind) <= 0) throw TraceError(where + "its kind runs on no GPU type of the cluster");
  if (job.n < 1 || !(job.p > 0 && job.p <= 1) || !(job.steps > 0) || !(job.arrival_s >= 0))
    throw TraceError(where + "needs n >= 1, p in (0, 1], steps > 0 and arrival_s >= 0");
  return job;
}

}  // namespace

Trace loadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw TraceError("cannot read " + path);
  json j;
  try {
    j = json::parse(in);
    Trace t;
    t.cluster = j.at("cluster").get<std::map<std::string, int>>();
    t.gpus_per_server = j.value("gpus_per_server", 4);
    t.kinds = j.at("kinds").get<std::map<std::string, std::map<std::string, double>>>();
    for (const auto& job : j.at("jobs")) t.jobs.push_back(jobFrom(job, t));
    std::stable_sort(t.jobs.begin(), t.jobs.end(), [](const TraceJob& a, const TraceJob& b) { return a.arrival_s < b.arrival_s; });
    if (t.cluster.empty() || t.gpus_per_server < 1) throw TraceError("the cluster needs GPUs, and gpus_per_server >= 1");
    return t;
  } catch (const json::exception& e) {
    throw TraceError(path + ": " + e.what());
  }
}

}  // namespace gpool::replay
