#include "sqlite_store.h"

#include "model_json.h"

namespace gpool::allocator {
namespace {

void bindText(sqlite3_stmt* s, int i, const std::string& v) {
  sqlite3_bind_text(s, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}

struct Stmt {
  sqlite3_stmt* s = nullptr;
  Stmt(sqlite3* db, const char* sql) {
    if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) != SQLITE_OK)
      throw StoreError(std::string("database: cannot prepare '") + sql + "': " + sqlite3_errmsg(db));
  }
  ~Stmt() { sqlite3_finalize(s); }
  void text(int i, const std::string& v) { bindText(s, i, v); }
  std::string column(int i) {
    const unsigned char* t = sqlite3_column_text(s, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
};

}  // namespace

SqliteStore::SqliteStore(const std::string& path) : path_(path) {
  if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) {
    std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw StoreError("cannot open the database " + path + ": " + why);
  }
  sqlite3_busy_timeout(db_, 5000);
  exec("PRAGMA journal_mode=WAL");
  exec("PRAGMA synchronous=NORMAL");  // WAL + NORMAL: a committed transaction survives a crash of the process
  exec("PRAGMA wal_autocheckpoint=0");  // checkpoint() does it, off the request path
  if (sqlite3_open(path.c_str(), &checkpointer_) != SQLITE_OK) throw StoreError("cannot open the database " + path + " twice");
  sqlite3_busy_timeout(checkpointer_, 1000);
  exec("CREATE TABLE IF NOT EXISTS policy (id INTEGER PRIMARY KEY CHECK (id = 1), toml TEXT NOT NULL)");
  exec("CREATE TABLE IF NOT EXISTS servers (name TEXT PRIMARY KEY, doc TEXT NOT NULL)");
  exec("CREATE TABLE IF NOT EXISTS leases (id TEXT PRIMARY KEY, state TEXT NOT NULL, doc TEXT NOT NULL)");
  exec("CREATE INDEX IF NOT EXISTS leases_state ON leases (state)");
  exec("CREATE TABLE IF NOT EXISTS service_accounts (name TEXT PRIMARY KEY, doc TEXT NOT NULL)");
  exec("CREATE TABLE IF NOT EXISTS server_keys (name TEXT PRIMARY KEY, public_pem TEXT NOT NULL)");
  Stmt check(db_, "PRAGMA quick_check");
  if (sqlite3_step(check.s) != SQLITE_ROW || check.column(0) != "ok")
    throw StoreError("the database " + path + " is damaged (PRAGMA quick_check: " + check.column(0) +
                     "); restore it from a backup or move it away to start empty");
}

SqliteStore::~SqliteStore() {
  for (sqlite3_stmt* st : {begin_, commit_, upsert_server_, upsert_lease_}) sqlite3_finalize(st);
  sqlite3_close(checkpointer_);
  sqlite3_close(db_);
}

void SqliteStore::checkpoint() { sqlite3_wal_checkpoint_v2(checkpointer_, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr); }

void SqliteStore::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : "unknown error";
    sqlite3_free(err);
    throw StoreError("database " + path_ + ": " + why + " (in: " + sql + ")");
  }
}

sqlite3_stmt* SqliteStore::prepared(sqlite3_stmt*& slot, const char* sql) {
  if (!slot && sqlite3_prepare_v2(db_, sql, -1, &slot, nullptr) != SQLITE_OK)
    throw StoreError(std::string("database: cannot prepare '") + sql + "': " + sqlite3_errmsg(db_));
  return slot;
}

void SqliteStore::run(sqlite3_stmt* st) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  if (rc != SQLITE_DONE) throw StoreError("database " + path_ + ": " + sqlite3_errmsg(db_));
}

std::optional<std::string> SqliteStore::policyText() {
  Stmt q(db_, "SELECT toml FROM policy WHERE id = 1");
  if (sqlite3_step(q.s) == SQLITE_ROW) return q.column(0);
  return std::nullopt;
}

std::map<std::string, Server> SqliteStore::servers() {
  std::map<std::string, Server> out;
  Stmt q(db_, "SELECT doc FROM servers");
  while (sqlite3_step(q.s) == SQLITE_ROW) {
    Server s = serverFromJson(nlohmann::json::parse(q.column(0)));
    out[s.name] = std::move(s);
  }
  return out;
}

std::map<std::string, Lease> SqliteStore::leases(bool include_ended) {
  std::map<std::string, Lease> out;
  Stmt q(db_, include_ended ? "SELECT doc FROM leases" : "SELECT doc FROM leases WHERE state != 'ended'");
  while (sqlite3_step(q.s) == SQLITE_ROW) {
    Lease l = leaseFromJson(nlohmann::json::parse(q.column(0)));
    out[l.id] = std::move(l);
  }
  return out;
}

std::vector<ServiceAccount> SqliteStore::serviceAccounts() {
  std::vector<ServiceAccount> out;
  Stmt q(db_, "SELECT doc FROM service_accounts");
  while (sqlite3_step(q.s) == SQLITE_ROW) out.push_back(serviceAccountFromJson(nlohmann::json::parse(q.column(0))));
  return out;
}

void SqliteStore::saveServiceAccount(const std::string& name, const ServiceAccount* account) {
  Stmt q(db_, account ? "INSERT INTO service_accounts (name, doc) VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET doc = excluded.doc"
                      : "DELETE FROM service_accounts WHERE name = ?1");
  q.text(1, name);
  if (account) q.text(2, toJson(*account).dump());
  if (sqlite3_step(q.s) != SQLITE_DONE) throw StoreError(std::string("database: ") + sqlite3_errmsg(db_));
}

std::map<std::string, std::string> SqliteStore::serverKeys() {
  std::map<std::string, std::string> out;
  Stmt q(db_, "SELECT name, public_pem FROM server_keys");
  while (sqlite3_step(q.s) == SQLITE_ROW) out[q.column(0)] = q.column(1);
  return out;
}

void SqliteStore::saveServerKey(const std::string& name, const std::string* public_pem) {
  Stmt q(db_, public_pem ? "INSERT INTO server_keys (name, public_pem) VALUES (?1, ?2) "
                           "ON CONFLICT(name) DO UPDATE SET public_pem = excluded.public_pem"
                         : "DELETE FROM server_keys WHERE name = ?1");
  q.text(1, name);
  if (public_pem) q.text(2, *public_pem);
  if (sqlite3_step(q.s) != SQLITE_DONE) throw StoreError(std::string("database: ") + sqlite3_errmsg(db_));
}

int SqliteStore::forgetEndedBefore(int64_t cutoff_unix_s) {
  Stmt q(db_, "DELETE FROM leases WHERE state = 'ended' AND COALESCE(json_extract(doc, '$.ended_unix_s'), 0) < ?1");
  sqlite3_bind_int64(q.s, 1, cutoff_unix_s);
  if (sqlite3_step(q.s) != SQLITE_DONE) throw StoreError(std::string("forgetting ended leases: ") + sqlite3_errmsg(db_));
  return sqlite3_changes(db_);
}

void SqliteStore::write(const Changes& c) {
  if (c.empty()) return;
  run(prepared(begin_, "BEGIN IMMEDIATE"));
  try {
    if (c.policy) {
      Stmt p(db_, "INSERT INTO policy (id, toml) VALUES (1, ?1) ON CONFLICT(id) DO UPDATE SET toml = excluded.toml");
      p.text(1, *c.policy);
      if (sqlite3_step(p.s) != SQLITE_DONE) throw StoreError(std::string("database: ") + sqlite3_errmsg(db_));
    }
    for (const auto& [name, doc] : c.servers) {
      sqlite3_stmt* st = prepared(upsert_server_, "INSERT INTO servers (name, doc) VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET doc = excluded.doc");
      bindText(st, 1, name);
      bindText(st, 2, doc);
      run(st);
    }
    for (const auto& [id, record] : c.leases) {
      sqlite3_stmt* st = prepared(upsert_lease_, "INSERT INTO leases (id, state, doc) VALUES (?1, ?2, ?3) "
                                                 "ON CONFLICT(id) DO UPDATE SET state = excluded.state, doc = excluded.doc");
      bindText(st, 1, id);
      bindText(st, 2, stateName(record.state));
      bindText(st, 3, record.doc);
      run(st);
    }
    run(prepared(commit_, "COMMIT"));
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

}  // namespace gpool::allocator
