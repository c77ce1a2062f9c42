// gpool-server's /metrics (server_metrics.h).
#include "server_metrics.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <stdexcept>
#include <thread>

#include "gpool/printable.h"
#include "gpool/protocol/transport.h"

namespace gpool::server {
namespace {

std::string quoted(const std::string& v) { return "\"" + metricLabel(v) + "\""; }

void family(std::ostringstream& o, const char* name, const char* type, const char* help) {
  o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}

const char* refusalName(Refusal r) {
  switch (r) {
    case Refusal::kRequest: return "request";
    case Refusal::kCapacity: return "capacity";
    case Refusal::kLease: return "lease";
    case Refusal::kInternal: return "internal";
    case Refusal::kAddress: return "address";
  }
  return "?";
}

std::string shareLabels(const ShareFigures& s) {
  return "{lease=" + quoted(s.lease) + ",share=\"" + std::to_string(s.share) + "\",device=\"" + std::to_string(s.device) + "\"}";
}

void shareFigures(std::ostringstream& o, const std::vector<ShareFigures>& shares) {
  family(o, "gpool_share_fraction", "gauge", "The share's fraction of its GPU (of its memory and, below 1, of its time).");
  for (const auto& s : shares) o << "gpool_share_fraction" << shareLabels(s) << ' ' << s.fraction << '\n';
  family(o, "gpool_share_memory_bytes", "gauge", "Device memory the share's processes hold together.");
  for (const auto& s : shares)
    if (s.capped) o << "gpool_share_memory_bytes" << shareLabels(s) << ' ' << s.memory_used << '\n';
  family(o, "gpool_share_memory_limit_bytes", "gauge", "The share's memory cap.");
  for (const auto& s : shares)
    if (s.capped) o << "gpool_share_memory_limit_bytes" << shareLabels(s) << ' ' << s.memory_limit << '\n';
  family(o, "gpool_share_device_seconds_total", "counter",
         "Device time the share's kernels and graphs took, measured on the device (shares below a whole GPU).");
  for (const auto& s : shares)
    if (s.paced) o << "gpool_share_device_seconds_total" << shareLabels(s) << ' ' << static_cast<double>(s.busy_ns) / 1e9 << '\n';
  family(o, "gpool_share_held_back_seconds_total", "counter",
         "Time the share's launches waited for its share of the GPU's time (shares below a whole GPU).");
  for (const auto& s : shares)
    if (s.paced) o << "gpool_share_held_back_seconds_total" << shareLabels(s) << ' ' << static_cast<double>(s.waited_ns) / 1e9 << '\n';
}

}  // namespace

std::string renderMetrics(const ServerFigures& f) {
  std::ostringstream o;
  o.precision(15);  // seconds counted over days keep their milliseconds
  family(o, "gpool_server_info", "gauge", "This gpool-server, labelled with its backend.");
  o << "gpool_server_info{backend=" << quoted(f.backend) << "} 1\n";
  family(o, "gpool_server_clients", "gauge", "Clients connected, each served by a worker process.");
  o << "gpool_server_clients " << f.clients << '\n';
  family(o, "gpool_server_max_clients", "gauge", "The most clients served at once (--max-clients).");
  o << "gpool_server_max_clients " << f.max_clients << '\n';
  family(o, "gpool_server_draining", "gauge", "1 after a first shutdown signal: no new clients.");
  o << "gpool_server_draining " << (f.draining ? 1 : 0) << '\n';
  family(o, "gpool_server_clients_refused_total", "counter",
         "Connections turned away: a malformed or unsupported hello (request), no room (capacity), a token refused "
         "or a lease ended (lease), a worker that could not start (internal), closed at once because its address had "
         "--max-pending-per-address connections in their handshake (address).");
  for (size_t r = 0; r < kRefusals; ++r)
    o << "gpool_server_clients_refused_total{reason=\"" << refusalName(static_cast<Refusal>(r)) << "\"} " << f.refused[r] << '\n';
  family(o, "gpool_server_memory_overruns_total", "counter",
         "Leases whose processes were ended for holding more device memory, as the driver counts it, than the lease's cap and "
         "what their workers' contexts take (--context-memory): a worker went around its lease's cap.");
  o << "gpool_server_memory_overruns_total " << f.memory_overruns << '\n';
  family(o, "gpool_server_compute_overruns_total", "counter",
         "Leases whose processes were ended for taking more device time, as the driver counts it, than the lease's share "
         "and --compute-audit seconds: a kernel that long, or a worker that went around its lease's share.");
  o << "gpool_server_compute_overruns_total " << f.compute_overruns << '\n';
  if (f.worker_uids) {
    family(o, "gpool_server_worker_uids", "gauge", "The uids of --worker-uids: all of them, and those serving a lease.");
    o << "gpool_server_worker_uids{state=\"total\"} " << f.worker_uids << '\n';
    o << "gpool_server_worker_uids{state=\"in_use\"} " << f.worker_uids_in_use << '\n';
  }
  family(o, "gpool_lease_workers", "gauge", "Worker processes serving the lease here (one per process of its program).");
  for (const auto& l : f.leases) o << "gpool_lease_workers{lease=" << quoted(l.lease) << "} " << l.workers << '\n';
  family(o, "gpool_lease_kernel_launches_total", "counter", "Kernels and graphs the lease's workers here launched.");
  for (const auto& l : f.leases) o << "gpool_lease_kernel_launches_total{lease=" << quoted(l.lease) << "} " << l.launches << '\n';
  family(o, "gpool_lease_compute_ahead_seconds", "gauge",
         "Device time the lease's processes took past its share, as the driver counts it, on its device most ahead "
         "(paid back at its share's rate while it idles); past --compute-audit its processes are ended. Leases below a "
         "whole GPU, with the audit on.");
  for (const auto& l : f.leases)
    if (l.ahead_ns) o << "gpool_lease_compute_ahead_seconds{lease=" << quoted(l.lease) << "} " << static_cast<double>(*l.ahead_ns) / 1e9 << '\n';
  shareFigures(o, f.shares);
  return o.str();
}

struct MetricsEndpoint::Impl {
  httplib::Server http;
  std::thread thread;
};

MetricsEndpoint::MetricsEndpoint(const std::string& listen, Figures figures) : impl_(std::make_unique<Impl>()) {
  std::string host;
  uint16_t port = 0;
  if (!proto::parseHostPort(listen, host, port))
    throw std::runtime_error("malformed --metrics '" + listen + "': expected HOST:PORT, e.g. 127.0.0.1:9420");
  impl_->http.Get("/metrics", [figures = std::move(figures)](const httplib::Request&, httplib::Response& res) {
    auto f = figures();
    if (!f) {
      res.status = 503;
      return res.set_content("gpool-server did not gather its figures in time\n", "text/plain");
    }
    res.set_content(renderMetrics(*f), "text/plain; version=0.0.4");
  });
  impl_->http.set_socket_options([](socket_t sock) {  // not httplib's SO_REUSEPORT: a port in use fails
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  port_ = port == 0 ? impl_->http.bind_to_any_port(host) : (impl_->http.bind_to_port(host, port) ? port : -1);
  if (port_ < 0) throw std::runtime_error("cannot serve --metrics on " + listen + " (address in use, or not this host's)");
  impl_->thread = std::thread([this] { impl_->http.listen_after_bind(); });
  spdlog::info("metrics on http://{}:{}/metrics", host, port_);
}

MetricsEndpoint::~MetricsEndpoint() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace gpool::server
