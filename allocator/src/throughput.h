// How fast each kind of job runs on each GPU type (issue 15), from counts that rise as a job works: what
// jobs report of their own progress (gpool run's GPOOL_PROGRESS_FILE, sent with each heartbeat), or the
// kernels their workers launched (gpool-server's heartbeats). Each source is one Throughputs; where it
// has not measured a kind enough, the policy's [job_kinds] table answers.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "policy.h"

namespace gpool::allocator {

class Throughputs {
 public:
  struct Measured {
    double rate = 0;   // progress per second on a whole GPU of the type (a moving average)
    int samples = 0;
  };
  // One measurement: `rate` per second of a job of `kind` on a share of `fraction` of a GPU of `type`
  // (counted as rate / fraction per whole GPU).
  void add(const std::string& kind, const std::string& type, double rate, double fraction);
  // How fast `kind` runs on `type` against its fastest type (0 to 1). Measured, once the kind has been
  // measured on every type the policy's table names for it (at least two): its units are the job's own,
  // so they are not mixed with the table's. Else the table (Policy::relativeSpeed).
  double relative(const Policy& policy, const std::string& kind, const std::string& type) const;
  bool knows(const Policy& policy, const std::string& kind) const;  // the table or measurements name it
  bool measures(const Policy& policy, const std::string& kind) const;  // relative() answers from measurements
  const std::map<std::string, std::map<std::string, Measured>>& measured() const { return measured_; }

 private:
  std::map<std::string, std::map<std::string, Measured>> measured_;  // kind → type → what was seen
};

}  // namespace gpool::allocator
