// gpool-server's side of the allocator: registers this server's GPUs, heartbeats, reports clients
// that left (so their shares free at once) and hands back the leases the allocator revoked.
// Requests are signed with the lease key (X-Gpool-Signature, docs/api.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace gpool::server {

class AllocatorLink {
 public:
  // `registration`: the JSON body of POST /v1/servers. `revoked` runs on the link's thread.
  AllocatorLink(std::string url, std::string key, std::string name, std::string registration,
                std::function<void(const std::string& lease)> revoked);
  ~AllocatorLink();
  void released(const std::string& lease);  // queued; sent by the link's thread

 private:
  void loop();
  std::string url_, key_, name_, registration_;
  std::function<void(const std::string&)> revoked_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> released_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpool::server
