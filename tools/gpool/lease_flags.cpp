#include "lease_flags.h"

#include <sstream>
#include <vector>

#include "cli_common.h"
#include "gpool/allocator/lease_token.h"
#include "gpool/allocator/units.h"

namespace gpool::cli {
namespace {

std::vector<std::string> commaList(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

// A fraction of one GPU: more than 0 and at most 1 (more GPUs are -n's).
const CLI::Validator kFractionOfAGpu(
    [](std::string& text) -> std::string {
      double v = 0;
      if (CLI::detail::lexical_cast(text, v) && v > 0 && v <= 1) return "";
      return "'" + text + "' is not a fraction of one GPU: give more than 0 and at most 1, e.g. 0.5 (-n asks for more GPUs)";
    },
    "FRACTION in (0, 1]");

}  // namespace

void LeaseFlags::declare(CLI::App& sub) {
  sub.add_option("-n,--gpus", n, "number of GPUs")->capture_default_str()->check(CLI::Range(1, 1024));
  sub.add_option("-p,--fraction", p, "fraction of each GPU (one the pool offers, e.g. 1, 0.5, 0.25)")
      ->capture_default_str()
      ->check(kFractionOfAGpu);
  sub.add_option("-m,--memory", memory, "GPU memory per GPU, e.g. 16GiB (default: the fraction of the GPU's memory); "
                                        "allocations past it fail with out-of-memory");
  sub.add_option("--wait", wait, "how long to wait in the queue while GPUs are short (e.g. 30s, 10m; 0: not at "
                                 "all; forever: no limit)")
      ->capture_default_str();
  sub.add_option("--pool", pool, "pool to lease from")->capture_default_str();
  sub.add_option("--priority", priority, "priority class (default: the policy's default; the policy says who may use which)");
  sub.add_option("--group", group, "one of your groups to charge the lease to (quotas; default: your primary group)");
  sub.add_option("--user", user, "request the lease for another user (admins only; default: you)");
  sub.add_option("--min-fraction", min_fraction,
                 "elastic: when -p is not free, take any smaller fraction the pool offers down to this one (the "
                 "program reads what it got from GPOOL_FRACTION and cuMemGetInfo)")
      ->check(kFractionOfAGpu);
  sub.add_option("--gpu-type", gpu_types,
                 "GPU types the command may run on, comma-separated (e.g. H100,A100; `gpool status` lists each GPU's "
                 "type; default: any)");
  sub.add_option("--kind", kind,
                 "what kind of job this is (a name in the policy's [job_kinds], which says how fast each kind runs on "
                 "each GPU type): it is placed on the fastest type with room");
  sub.add_option("--estimate", estimate,
                 "how long the job runs alone on its fastest GPU type (e.g. 2h): pools ordered shortest-first grant "
                 "shorter jobs first");
  sub.add_option("--time", time_limit,
                 "time limit (e.g. 2h): the lease ends this long after its grant, with notice as for preemption "
                 "(SIGTERM, then the policy's grace period); gpool run then exits with 124 (default: the pool's max_time, "
                 "if it has one)");
  sub.add_flag("--non-preemptible", non_preemptible,
               "never preempt this lease to give a queue its guarantee back (it is then granted only within your "
               "queue's guarantee)");
}

double LeaseFlags::waitSeconds() const { return wait == "forever" ? -1 : durationSeconds("--wait", wait); }

nlohmann::json LeaseFlags::request(bool restartable, bool job) const {
  // The lease is held for the command, which may run one CUDA process after another: it lasts until the
  // command ends, not only while a process is connected.
  nlohmann::json req = {{"n", n}, {"p", p}, {"pool", pool}, {"ends_with_clients", false}, {"wait", waitSeconds()}};
  if (!user.empty()) req["user"] = user;
  if (!group.empty()) req["group"] = group;
  if (!priority.empty()) req["priority"] = priority;
  if (min_fraction > 0) {
    if (min_fraction > p) die(kExitUsage, "--min-fraction must not be more than -p (" + gpool::allocator::formatNumber(p) + ")");
    req["min_p"] = min_fraction;
  }
  if (non_preemptible) req["preemptible"] = false;
  if (!kind.empty()) req["kind"] = kind;
  if (restartable) req["restartable"] = true;
  if (job) req["job"] = gpool::token::randomHex(8);  // one job across its requeues (least-attained pools)
  if (!estimate.empty()) req["estimate_s"] = durationSeconds("--estimate", estimate);
  if (!time_limit.empty()) {
    req["time_limit"] = durationSeconds("--time", time_limit);
    if (req["time_limit"].get<double>() <= 0) die(kExitUsage, "--time must be longer than 0s");
  }
  if (!gpu_types.empty()) req["gpu_types"] = commaList(gpu_types);
  if (!memory.empty()) {
    try {
      req["m"] = gpool::allocator::parseSize(memory);
    } catch (const std::exception& e) {
      die(kExitUsage, std::string("-m: ") + e.what());
    }
  }
  return req;
}

}  // namespace gpool::cli
