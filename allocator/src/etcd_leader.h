// Leader election among gpool-allocator replicas sharing an etcd store (issue 16). The leader holds the
// key /gpool/leader, whose value is its URL, through an etcd lease it keeps alive; the others watch the
// key and take it when it goes (the leader resigned, or its lease lapsed because it died or lost etcd).
// Every write the leader makes compares the key's create revision with its own (etcd_store.cpp), so an
// allocator that lost the lead cannot write, even before it learns that it lost it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "etcd_client.h"

namespace gpool::allocator {

struct Campaign {
  std::string me;   // this allocator's URL, which standbys give clients
  int ttl_s = 3;    // the lease's time to live: how long a dead leader holds the lead
  std::function<void(const std::string& leader)> standing_by;  // told who leads, each time that changes
  std::function<void()> lost;  // called once, from the keeper's thread, when this allocator stops leading
  const std::atomic<bool>* stop = nullptr;  // campaign() gives up when it becomes true
};

class EtcdLeader {
 public:
  static const std::string kKey;  // /gpool/leader
  explicit EtcdLeader(const std::string& url, EtcdAccess access = {});
  ~EtcdLeader();  // resigns: revokes the lease, so a standby takes over at once
  // Blocks until this allocator leads (true), or until *c.stop (false). Then keeps its lease alive.
  bool campaign(Campaign c);
  int64_t revision() const { return revision_; }  // the key's create revision while this allocator leads
  std::string leaderSeen();  // the leader last seen while standing by ("" none yet)

 private:
  bool tryToLead(const Campaign& c);
  void keepAlive(std::function<void()> lost, int ttl_s);
  EtcdClient etcd_;  // the campaign's
  std::string seen_;
  int64_t lease_ = 0, revision_ = 0;
  std::thread keeper_;
  std::mutex mu_;  // seen_, stop_
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::string url_;
  EtcdAccess access_;
};

}  // namespace gpool::allocator
