// A worker that ends without withdrawing its export records (killed, crashed, or ended by its bound after
// its lease) leaves them to the process that started it, which withdraws them and keeps what importers
// still hold (export_records.h). Before, its records stayed filed, and gpool-server knew nothing of them:
// memory other processes held was charged to no lease.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "export_records.h"
#include "gpool/hex.h"
#include "ipc_registry.h"

namespace gpool::worker {
namespace {

namespace cu = proto::cu;
using Handle = std::vector<uint8_t>;

// The file a handle's record is filed in, withdrawn or not (its key, bytes 24..56, in hex).
std::string recordPath(const Handle& h, bool withdrawn) {
  std::string key;
  char two[3];
  for (size_t i = 24; i < 56; ++i) snprintf(two, sizeof two, "%02x", h[i]), key += two;
  return IpcRegistry::directory() + "/" + key + (withdrawn ? ".withdrawn" : "");
}

bool exists(const std::string& path) { return std::filesystem::exists(path); }

void writeAll(int fd, const void* p, size_t n) { ASSERT_EQ(write(fd, p, n), static_cast<ssize_t>(n)); }
void readAll(int fd, void* p, size_t n) { ASSERT_EQ(read(fd, p, n), static_cast<ssize_t>(n)); }

// A worker that files one record (4096 bytes charged, with `seal`) and ends as if killed, so that the record
// stays filed: its pid, and the record's handle.
void workerThatFiledOne(const budget::RecordSeal& seal, pid_t& child, Handle& h) {
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    budget::sealRecordsWith(seal);
    IpcRegistry exporter;
    Handle filed(64);
    if (exporter.publish(IpcRegistry::Kind::kMemory, {7}, filed, 4096) != cu::kSuccess) _exit(2);
    (void)!write(done[1], filed.data(), 64);
    _exit(0);
  }
  h.assign(64, 0);
  readAll(done[0], h.data(), 64);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (int fd : done) close(fd);
}

TEST(ExportRecords, TheServerTakesOverWhatAnEndedWorkerExportedThatOthersHold) {
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the exporting worker: files three records, withdraws one that is held, ends like a kill
    IpcRegistry exporter;
    Handle held(64), unheld(64), freed(64);
    bool ok = exporter.publish(IpcRegistry::Kind::kMemory, {1, 2, 3}, held, 4096) == cu::kSuccess &&
              exporter.publish(IpcRegistry::Kind::kMemory, {4}, unheld, 8192) == cu::kSuccess &&
              exporter.publish(IpcRegistry::Kind::kMemory, {5}, freed, 1024) == cu::kSuccess;
    if (!ok) _exit(2);
    for (const Handle* h : {&held, &unheld, &freed}) (void)!write(to_parent[1], h->data(), 64);
    char go;
    if (read(to_child[0], &go, 1) != 1) _exit(3);
    IpcRegistry::RecordFile kept = exporter.withdraw(freed);  // the client freed it while it was imported
    _exit(kept ? 0 : 4);
  }
  Handle held(64), unheld(64), freed(64);
  for (Handle* h : {&held, &unheld, &freed}) readAll(to_parent[0], h->data(), 64);
  IpcRegistry importer, other;
  std::vector<uint8_t> record;
  IpcRegistry::RecordFile hold_held, hold_freed;
  ASSERT_EQ(importer.lookupHeld(IpcRegistry::Kind::kMemory, held, record, hold_held), cu::kSuccess);
  EXPECT_EQ(record, (std::vector<uint8_t>{1, 2, 3})) << "a record reads as it was filed";
  ASSERT_EQ(importer.lookupHeld(IpcRegistry::Kind::kMemory, freed, record, hold_freed), cu::kSuccess);
  Handle others(64);  // a record of another process, which is no child that ended
  ASSERT_EQ(other.publish(IpcRegistry::Kind::kMemory, {6}, others, 77), cu::kSuccess);
  writeAll(to_child[1], "g", 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(exists(recordPath(held, false))) << "a worker that is killed leaves its records filed";
  EXPECT_TRUE(exists(recordPath(freed, true)));

  std::vector<budget::HeldRecord> taken = budget::withdrawAllOf(child, getuid(), {});
  ASSERT_EQ(taken.size(), 2u) << "what importers hold, withdrawn by the worker or not";
  std::sort(taken.begin(), taken.end(), [](const auto& a, const auto& b) { return a.charge < b.charge; });
  EXPECT_EQ(taken[0].charge, 1024u);
  EXPECT_EQ(taken[1].charge, 4096u);
  EXPECT_FALSE(exists(recordPath(unheld, false)) || exists(recordPath(unheld, true))) << "a record nobody holds is gone";
  EXPECT_FALSE(exists(recordPath(held, false)));
  IpcRegistry::RecordFile late;
  EXPECT_EQ(importer.lookupHeld(IpcRegistry::Kind::kMemory, held, record, late), cu::kInvalidValue) << "withdrawn";
  EXPECT_EQ(importer.lookup(IpcRegistry::Kind::kMemory, others, record), cu::kSuccess) << "another's stays filed";
  EXPECT_TRUE(budget::withdrawAllOf(getpid(), getuid(), {}).empty()) << "only the process that started a worker takes its records";

  EXPECT_FALSE(taken[1].file.unheld());
  hold_held = {};
  EXPECT_TRUE(taken[1].file.unheld()) << "the importer let go";
  EXPECT_FALSE(taken[0].file.unheld()) << "the other is still held";
  taken.clear();
  EXPECT_FALSE(exists(recordPath(held, true)) || exists(recordPath(freed, true))) << "closed, the withdrawn files go";
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}

TEST(ExportRecords, AFileOpenedBeforeItsRecordWasWithdrawnIsNotTakenForTheRecord) {
  // An importer opens the record's file, its exporter withdraws the record while another importer holds it,
  // then the first importer takes its shared lock: the file, renamed and still there, is no filed record.
  IpcRegistry exporter, importer;
  Handle h(64);
  ASSERT_EQ(exporter.publish(IpcRegistry::Kind::kMemory, {9}, h, 4096), cu::kSuccess);
  std::vector<uint8_t> record;
  IpcRegistry::RecordFile hold;
  ASSERT_EQ(importer.lookupHeld(IpcRegistry::Kind::kMemory, h, record, hold), cu::kSuccess);
  int early = open(recordPath(h, false).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(early, 0);
  EXPECT_TRUE(budget::stillFiled(early, recordPath(h, false)));
  IpcRegistry::RecordFile kept = exporter.withdraw(h);
  EXPECT_TRUE(kept) << "held";
  EXPECT_TRUE(exists(recordPath(h, true)));
  EXPECT_EQ(flock(early, LOCK_SH | LOCK_NB), 0) << "the lock alone cannot tell";
  EXPECT_FALSE(budget::stillFiled(early, recordPath(h, false)));
  close(early);
  hold = {};
  EXPECT_TRUE(kept.unheld());
}

TEST(ExportRecords, ARecordAnotherUserOwnsIsNeverTakenAsTheWorkers) {
  // With gpool-server --worker-uids each lease's workers are a user of their own; a record file in the
  // worker's directory that names the worker but is another user's (what a worker of another lease, taken
  // over by its client, would file to keep this lease charged) is not the worker's.
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to give the record file to another user";
  pid_t child = 0;
  Handle h;
  ASSERT_NO_FATAL_FAILURE(workerThatFiledOne({}, child, h));
  IpcRegistry importer;
  std::vector<uint8_t> record;
  IpcRegistry::RecordFile hold;
  ASSERT_EQ(importer.lookupHeld(IpcRegistry::Kind::kMemory, h, record, hold), cu::kSuccess);
  ASSERT_EQ(chown(recordPath(h, false).c_str(), 61999, 61999), 0);
  EXPECT_TRUE(budget::withdrawAllOf(child, getuid(), {}).empty()) << "another user's file is no record of the worker";
  ASSERT_EQ(chown(recordPath(h, false).c_str(), getuid(), getgid()), 0);
  EXPECT_EQ(budget::withdrawAllOf(child, getuid(), {}).size(), 1u) << "its own user's is";
}

TEST(ExportRecords, ARecordWithoutTheWorkersSealIsNeverTakenAsTheWorkers) {
  // Without --worker-uids every worker is one user: a worker of another lease, taken over by its client, files
  // a record naming this worker and its server, and holds it, to keep this worker's lease charged once it
  // ends. It cannot know the seal gpool-server gave this worker, so the record is not the worker's.
  const budget::RecordSeal seal = budget::newRecordSeal();
  EXPECT_NE(seal, budget::RecordSeal{});
  budget::RecordSeal parsed{};  // (as the worker reads it from its environment)
  ASSERT_TRUE(unhexTo(hexOf(seal.data(), seal.size()), parsed.data(), parsed.size()));
  EXPECT_EQ(parsed, seal);
  EXPECT_FALSE(unhexTo("not a seal", parsed.data(), parsed.size()));
  pid_t child = 0;  // the worker, which files one record with its seal
  Handle h;
  ASSERT_NO_FATAL_FAILURE(workerThatFiledOne(seal, child, h));
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  int status = 0;
  // The forger: a process of the same user whose parent is the server too, naming the worker in its header.
  pid_t forger = fork();
  ASSERT_GE(forger, 0);
  if (forger == 0) {
    Handle fake(64);
    IpcRegistry other;  // (its own seal: none)
    if (other.publish(IpcRegistry::Kind::kMemory, {8}, fake, 1ull << 40) != cu::kSuccess) _exit(2);
    std::string path = recordPath(fake, false);
    int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    int32_t named = child;  // (the header: magic, server, worker, ...)
    if (fd < 0 || pwrite(fd, &named, sizeof named, 8) != sizeof named) _exit(3);
    close(fd);
    (void)!write(done[1], fake.data(), 64);
    _exit(0);
  }
  Handle fake(64);
  readAll(done[0], fake.data(), 64);
  ASSERT_EQ(waitpid(forger, &status, 0), forger);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  IpcRegistry importer;
  std::vector<uint8_t> record;
  IpcRegistry::RecordFile hold, hold_fake;
  ASSERT_EQ(importer.lookupHeld(IpcRegistry::Kind::kMemory, h, record, hold), cu::kSuccess);
  ASSERT_EQ(importer.lookupHeld(IpcRegistry::Kind::kMemory, fake, record, hold_fake), cu::kSuccess);
  std::vector<budget::HeldRecord> taken = budget::withdrawAllOf(child, getuid(), seal);
  ASSERT_EQ(taken.size(), 1u) << "the worker's own record only, not the forged one";
  EXPECT_EQ(taken[0].charge, 4096u);
  EXPECT_TRUE(budget::withdrawAllOf(child, getuid(), budget::newRecordSeal()).empty()) << "nor with another seal";
  hold_fake = {};
  importer.withdraw(fake);
  unlink(recordPath(fake, false).c_str());
  for (int fd : done) close(fd);
}

}  // namespace
}  // namespace gpool::worker
