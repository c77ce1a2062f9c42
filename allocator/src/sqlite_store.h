// The allocator's embedded store (the default): SQLite in WAL mode, one JSON document per server and per
// lease, and the policy's TOML text. Every change is written in one transaction before the API answers,
// so a restart (or a crash) loses no lease, policy or server.
#pragma once

#include <sqlite3.h>

#include <string>

#include "store.h"

namespace gpool::allocator {

class SqliteStore : public Store {
 public:
  explicit SqliteStore(const std::string& path);  // creates the file and schema when missing
  ~SqliteStore() override;

  std::optional<std::string> policyText() override;
  std::map<std::string, Server> servers() override;
  std::map<std::string, Lease> leases(bool include_ended) override;
  std::vector<ServiceAccount> serviceAccounts() override;
  void saveServiceAccount(const std::string& name, const ServiceAccount* account) override;
  std::map<std::string, std::string> serverKeys() override;
  void saveServerKey(const std::string& name, const std::string* public_pem) override;
  // Moves the write-ahead log into the database (on a connection of its own, so commits of the request
  // path never pay for it; SQLite's automatic checkpoints are off).
  void checkpoint() override;
  void write(const Changes& changes) override;
  int forgetEndedBefore(int64_t cutoff_unix_s) override;

 private:
  void exec(const char* sql);
  // write()'s statements, prepared once (parsing them cost as much as the writes on the request path).
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
