// gpool-server's side of the allocator: registers this server's GPUs, heartbeats, reports clients
// that left (so their shares free at once) and hands back the leases the allocator revoked and, with
// every answer, the leases it calls live on this server, with how many kernels each lease's workers launched
// and what its shares use.
// Requests are signed with this server's own key (X-Gpool-Signature, docs/api.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compute_pace.h"
#include "gpool/allocator/allocator_connection.h"
#include "gpool/allocator/ed25519_key.h"
#include "shared_budget.h"


namespace gpool::server {

class AllocatorLink {
 public:
  using Live = std::function<void(std::vector<std::string> leases, uint64_t request)>;
  // `url`: the allocator, or its replicas comma-separated (the one that leads is followed).
  // `registration`: the JSON body of POST /v1/servers. `revoked` and `live` run on the link's thread;
  // `live` gets the live leases and the number of the request they answer. `ca_file`: what verifies an
  // https:// allocator's certificate ("" = the system's CA store). Throws std::invalid_argument for a bad URL.
  AllocatorLink(std::string url, const std::string& ca_file, token::Ed25519Key key, std::string name, std::string registration,
                std::function<void(const std::string& lease)> revoked, Live live);
  ~AllocatorLink();
  void released(const std::string& lease);  // queued; sent by the link's thread
  // The leases this server runs workers for, reported with every heartbeat (the allocator holds an ended
  // lease's share until they are gone). A lease new in the list is reported at once.
  void serving(std::vector<std::string> leases);
  // Where each lease's figures are read for the heartbeats. Kernel launches: gpool-worker counts them in its
  // slot of its lease's `launches` page (a page per lease, so that a worker can reach no other lease's
  // count); what a lease's ended workers launched, and the slots of its running ones, sum to `launches`, from which the allocator measures how fast a job's kind runs on this server's GPUs. And its
  // shares' memory budgets and compute paces, summed to `use` (its memory, device time and time held back),
  // which `gpool status` shows. Every page is written by the lease's workers, so what is read of them is
  // held to what the allocator accepts (launches and memory up to 2^53, seconds from 0 to 10^12): a worker
  // taken over by its client can make its own lease's figures wrong, not every lease's heartbeat refused
  // (which, the server's heartbeats refused past its timeout, ended every lease on the server).
  struct LeaseSources {
    uint64_t ended = 0;
    std::vector<int> slots;
    std::shared_ptr<budget::SharedBudget> launches;  // the lease's launch counters, one slot per worker
    std::vector<std::shared_ptr<budget::SharedBudget>> memory;
    std::vector<std::shared_ptr<budget::ComputePace>> paces;
    uint64_t launched() const;  // ended, and what the running ones counted (at most 2^53)
  };
  void leaseSources(std::map<std::string, LeaseSources> by_lease);
  // Asks for a heartbeat now; returns the number of the request whose answer will be the first one
  // given after this call.
  uint64_t refresh();

 private:
  void loop();
  void sendReleased(std::unique_lock<std::mutex>& lock);
  std::string heartbeat() const;
  int answered(const httplib::Result& r, const std::string& path, uint64_t request);
  // Signs and posts to the replica that leads, following standbys' answers and trying each replica in
  // turn; the last answer (or failure) when none leads.
  httplib::Result post(const std::string& path, const std::string& body);
  std::string url_;
  token::Ed25519Key key_;
  std::string name_, registration_;
  std::unique_ptr<token::AllocatorReplicas> replicas_;
  std::function<void(const std::string&)> revoked_;
  Live live_;
  std::mutex mu_;
  uint64_t requests_ = 0;  // registrations and heartbeats sent
  bool wake_ = false;
  std::condition_variable cv_;
  std::deque<std::string> released_;
  std::vector<std::string> serving_;
  std::map<std::string, LeaseSources> lease_sources_;
  bool stop_ = false;
  // The link thread's own: whether the allocator knows this server, and how long to wait between requests.
  bool registered_ = false;
  int interval_ms_ = 1000, backoff_ms_ = 500;
  std::thread thread_;
};

}  // namespace gpool::server
