// The options gpool run and gpool lease share (how many GPUs, what fraction, how long to wait, which pool,
// queue and GPU types...), declared once for both, and the lease request (POST /v1/leases) they make.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>

namespace gpool::cli {

struct LeaseFlags {
  int n = 1;
  double p = 1.0, min_fraction = 0;
  bool non_preemptible = false;
  std::string memory, wait = "1h", pool = "default", priority, user, group, gpu_types, kind, estimate, time_limit;

  // Declares the options on `sub` (gpool run or gpool lease), writing into this.
  void declare(CLI::App& sub);
  // How long to wait in the queue, in seconds (-1: for ever). Dies with a usage message on a bad --wait.
  double waitSeconds() const;
  // The lease request. `restartable`: gpool run --requeue (the allocator may move it to a faster GPU
  // type); `job`: gpool run names one job across its requeues. Dies with a usage message on a bad value.
  nlohmann::json request(bool restartable, bool job) const;
};

}  // namespace gpool::cli
