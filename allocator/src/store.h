// The allocator's store: where the scheduler's state (servers, leases, the policy) and the identities it
// knows (service accounts, servers' keys) are kept, so that a restart loses nothing. Every change is
// written before the API answers. One implementation per kind of store: SQLite, embedded, is the
// default (sqlite_store.h); etcd keeps it in a cluster (etcd_store.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "scheduler.h"
#include "service_accounts.h"

namespace gpool::allocator {

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// This allocator no longer leads the store (another may): it must write nothing more.
class StoreDeposed : public StoreError {
 public:
  using StoreError::StoreError;
};

struct Campaign;  // etcd_leader.h

// Records as they were when a change was made (taken with the scheduler's lock held), to be written later.
struct Changes {
  struct LeaseRecord {
    LeaseState state;
    std::string doc;
  };
  std::optional<std::string> policy;
  std::map<std::string, std::string> servers;  // name → its record (JSON)
  std::map<std::string, LeaseRecord> leases;   // id → its record
  // The named records of `s` now (missing ones are left out), and the policy text when given.
  static Changes of(const Scheduler& s, const std::vector<std::string>& servers, const std::vector<std::string>& leases,
                    const std::string* policy_text);
  bool empty() const { return !policy && servers.empty() && leases.empty(); }
  size_t size() const { return (policy ? 1 : 0) + servers.size() + leases.size(); }
  void add(Changes&& later);  // a later change's records replace this one's
};

class Store {
 public:
  virtual ~Store() = default;
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Replicas (issue 16): whether several allocators may share this store, one leading at a time.
  virtual bool replicated() const { return false; }
  // Blocks until this allocator leads the store (true) or the campaign's stop flag is set (false). From
  // then on every write is refused (StoreDeposed) once another leads. A store that only one allocator
  // opens (SQLite) leads at once.
  virtual bool lead(Campaign c);
  virtual std::string leaderSeen() { return ""; }  // while standing by: the leader's URL, when known
  // Checks that every replica holds the same secret, by a fingerprint of it that reveals nothing: the first
  // to start records it; a replica whose fingerprint differs gets a StoreError naming the fix.
  virtual void agreeOn(const std::string& secret, const std::string& fingerprint, const std::string& fix) {
    (void)secret, (void)fingerprint, (void)fix;
  }
  virtual std::optional<std::string> policyText() = 0;
  virtual std::map<std::string, Server> servers() = 0;
  virtual std::map<std::string, Lease> leases(bool include_ended) = 0;
  virtual std::vector<ServiceAccount> serviceAccounts() = 0;
  // Writes one service account (nullptr: deletes it).
  virtual void saveServiceAccount(const std::string& name, const ServiceAccount* account) = 0;
  virtual std::map<std::string, std::string> serverKeys() = 0;  // enrolled servers' public keys (PEM), by name
  virtual void saveServerKey(const std::string& name, const std::string* public_pem) = 0;  // nullptr: deletes it
  // Housekeeping off the request path, about once a second (without the scheduler's lock).
  virtual void checkpoint() = 0;
  // Writes changes, all or nothing.
  virtual void write(const Changes& changes) = 0;
  // Writes the named records' current state (and the policy text when given), all or nothing.
  void save(const Scheduler& s, const std::vector<std::string>& servers, const std::vector<std::string>& leases,
            const std::string* policy_text = nullptr) {
    write(Changes::of(s, servers, leases, policy_text));
  }
  // Deletes the leases that ended before `cutoff_unix_s` by the wall clock (the policy's retention
  // period; ones recorded before their end time was kept count as ended long ago); returns how many.
  virtual int forgetEndedBefore(int64_t cutoff_unix_s) = 0;
};

// How the allocator reaches etcd's members: over TLS ("" ca: plain HTTP), with the CA that signed their
// certificates and this allocator's client certificate and key where etcd asks for one
// (--client-cert-auth); and as an etcd user ("" user: none), where etcd's authentication is enabled.
struct EtcdAccess {
  std::string ca, cert, key;
  std::string user, password;  // the password itself, read from --etcd-password-file
};

// The store `where` names: etcd://HOST:PORT,... (etcd_store.h), else a file path (SQLite, made when
// missing). Throws StoreError.
std::unique_ptr<Store> openStore(const std::string& where, const EtcdAccess& access = {});

}  // namespace gpool::allocator
