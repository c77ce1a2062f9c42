// gpool-server's /metrics (`--metrics HOST:PORT`, Prometheus text format): what this GPU host serves, and
// what each lease uses of it — its workers, kernel launches, and per share its memory against its cap and,
// for a share below a whole GPU, the device time its kernels took and the time its launches were held back
// for its share. The listener gathers the figures on its own thread (figures are read, never kept here);
// this file owns the endpoint and the text.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpool::server {

// Why a connection was turned away before it got a worker.
enum class Refusal { kRequest, kCapacity, kLease, kInternal, kAddress };
inline constexpr size_t kRefusals = 5;

struct ShareFigures {  // one share of a lease (lease tokens number them: docs/api.md)
  std::string lease;
  int share = 0, device = 0;
  double fraction = 1;
  bool capped = false;  // a memory cap holds (the figures below are counted)
  uint64_t memory_used = 0, memory_limit = 0;
  bool paced = false;  // a share below a whole GPU: its device time is measured
  int64_t busy_ns = 0, waited_ns = 0;
};

struct LeaseFigures {
  std::string lease;
  unsigned workers = 0;
  uint64_t launches = 0;  // kernels its workers launched, the ended ones' included
  std::optional<int64_t> ahead_ns;  // device time taken past its share, as the driver counts (compute_audit.h)
};

struct ServerFigures {
  std::string backend;
  unsigned clients = 0, max_clients = 0;
  bool draining = false;
  std::array<uint64_t, kRefusals> refused{};
  size_t worker_uids = 0, worker_uids_in_use = 0;  // --worker-uids: the range's size, and those serving a lease
  std::vector<LeaseFigures> leases;
  std::vector<ShareFigures> shares;
  uint64_t memory_overruns = 0;  // leases whose processes were ended for holding more than their cap (memory_audit.h)
  uint64_t compute_overruns = 0;  // ... for taking more device time than their share and --compute-audit (compute_audit.h)
};

// The figures as Prometheus text (version 0.0.4).
std::string renderMetrics(const ServerFigures& f);

// Serves GET /metrics on `listen` (HOST:PORT; port 0 picks one) from a thread of its own. `figures` is
// called for each scrape; nullopt (the server did not answer in time) is a 503.
class MetricsEndpoint {
 public:
  using Figures = std::function<std::optional<ServerFigures>()>;
  // Throws std::runtime_error naming the address when it cannot listen there.
  MetricsEndpoint(const std::string& listen, Figures figures);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace gpool::server
