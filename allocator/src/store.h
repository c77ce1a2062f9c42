// The allocator's database: SQLite in WAL mode, one JSON document per server and per lease, and the
// policy's TOML text. Every change the scheduler makes is written in one transaction before the API
// answers, so a restart (or a crash) loses no lease, policy or server.
#pragma once

#include <sqlite3.h>

#include <map>
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

class Store {
 public:
  explicit Store(const std::string& path);  // creates the file and schema when missing
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  std::optional<std::string> policyText();
  std::map<std::string, Server> servers();
  std::map<std::string, Lease> leases(bool include_ended);
  std::vector<ServiceAccount> serviceAccounts();
  // Writes one service account (nullptr: deletes it).
  void saveServiceAccount(const std::string& name, const ServiceAccount* account);
  std::map<std::string, std::string> serverKeys();  // enrolled servers' public keys (PEM), by name
  void saveServerKey(const std::string& name, const std::string* public_pem);  // nullptr: deletes it

  // Writes the named records' current state (and the policy text when given) in one transaction.
  // Moves the write-ahead log into the database (on a connection of its own, so commits of the request
  // path never pay for it; SQLite's automatic checkpoints are off).
  void checkpoint();

  void save(const Scheduler& s, const std::vector<std::string>& servers, const std::vector<std::string>& leases,
            const std::string* policy_text = nullptr);
  // Deletes the leases that ended before `cutoff_unix_s` by the wall clock (the policy's retention
  // period; ones recorded before their end time was kept count as ended long ago); returns how many.
  int forgetEndedBefore(int64_t cutoff_unix_s);

 private:
  void exec(const char* sql);
  // save()'s statements, prepared once (parsing them cost as much as the writes on the request path).
  sqlite3_stmt* prepared(sqlite3_stmt*& slot, const char* sql);
  void run(sqlite3_stmt* s);  // steps a statement that returns no rows, then resets it
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
  sqlite3_stmt* upsert_server_ = nullptr;
  sqlite3_stmt* upsert_lease_ = nullptr;
  sqlite3* db_ = nullptr;
  sqlite3* checkpointer_ = nullptr;
  std::string path_;
};

}  // namespace gpool::allocator
