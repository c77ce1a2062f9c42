// Physical memory and pools shared between workers as file descriptors (server/worker/shareable_handles.h): a handle
// fetches the very descriptor its exporter filed; a forged or withdrawn handle, or one of another host,
// fetches nothing; and a peer on the socket that stalls or talks nonsense costs only its own connection.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "handle_table.h"
#include "import_holds.h"
#include "ipc_registry.h"
#include "shareable_handles.h"

using gpool::worker::IpcRegistry;
using gpool::worker::ShareableHandles;
namespace cu = gpool::proto::cu;
constexpr auto kPhysical = ShareableHandles::Object::kPhysical, kPool = ShareableHandles::Object::kPool;

namespace {

// A memfd of `bytes` whose first byte is `mark`.
int memory(size_t bytes, char mark) {
  int fd = memfd_create("shareable-test", MFD_CLOEXEC);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
  EXPECT_EQ(pwrite(fd, &mark, 1, 0), 1);
  return fd;
}

char firstByte(int fd) {
  char c = 0;
  EXPECT_EQ(pread(fd, &c, 1, 0), 1);
  return c;
}

// The exporter's socket, from the files in the registry's directory that this process made.
std::string exporterSocket() {
  std::string prefix = IpcRegistry::directory() + "/fd-" + std::to_string(getpid()) + "-";
  for (int n = 0; n < 64; ++n) {
    std::string path = prefix + std::to_string(n) + ".sock";
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return path;
  }
  return "";
}

int connectTo(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << path;
  return fd;
}

struct Exporter {
  IpcRegistry registry;
  ShareableHandles handles{registry};
};

}  // namespace

TEST(ShareableHandles, AHandleFetchesItsDescriptorAndAForgedOneNothing) {
  Exporter ex;
  std::vector<uint8_t> a, b, again;
  ASSERT_EQ(ex.handles.publish(kPhysical, 11, memory(4096, 'a'), 4096, 4096, a), cu::kSuccess);
  ASSERT_EQ(ex.handles.publish(kPhysical, 12, memory(8192, 'b'), 8192, 8192, b), cu::kSuccess);
  ASSERT_EQ(ex.handles.publish(kPhysical, 11, memory(4096, 'x'), 4096, 4096, again), cu::kSuccess);
  EXPECT_EQ(again, a) << "memory exported again keeps its handle";
  EXPECT_NE(a, b);

  IpcRegistry other;  // another worker of this host
  ShareableHandles importer(other);
  int fd = -1;
  uint64_t bytes = 0;
  ASSERT_EQ(importer.open(b, kPhysical, fd, bytes), cu::kSuccess);
  EXPECT_EQ(firstByte(fd), 'b');
  EXPECT_EQ(bytes, 8192u);
  close(fd);
  ASSERT_EQ(importer.open(a, kPhysical, fd, bytes), cu::kSuccess);
  EXPECT_EQ(firstByte(fd), 'a') << "the descriptor first filed, not the one offered again";
  close(fd);

  std::vector<uint8_t> pool;
  ASSERT_EQ(ex.handles.publish(kPool, 11, memory(4096, 'p'), 0, 0, pool), cu::kSuccess);
  EXPECT_NE(pool, a) << "a pool and physical memory of one number are two exports";
  EXPECT_EQ(importer.open(pool, kPhysical, fd, bytes), cu::kInvalidValue) << "a pool's handle names no physical memory";
  ASSERT_EQ(importer.open(pool, kPool, fd, bytes), cu::kSuccess);
  EXPECT_EQ(firstByte(fd), 'p');
  close(fd);

  std::vector<uint8_t> forged = a;
  forged[40] ^= 0x01;  // inside the key
  EXPECT_EQ(importer.open(forged, kPhysical, fd, bytes), cu::kInvalidValue);
  std::vector<uint8_t> foreign = a;
  foreign[8] ^= 0xff;  // the host part
  EXPECT_EQ(importer.open(foreign, kPhysical, fd, bytes), cu::kNotSupported);
  EXPECT_EQ(importer.open(std::vector<uint8_t>(10, 0), kPhysical, fd, bytes), cu::kInvalidValue);

  ex.handles.withdraw(kPhysical, 12);
  EXPECT_EQ(importer.open(b, kPhysical, fd, bytes), cu::kInvalidValue) << "a withdrawn export fetches nothing";
  ASSERT_EQ(importer.open(a, kPhysical, fd, bytes), cu::kSuccess) << "the other export stays";
  close(fd);
}

// A peer that connects and says nothing is dropped after the timeout, and meanwhile delays no one; one that
// sends a handle nobody filed, or a short one, gets no descriptor; a real request is served all the same.
TEST(ShareableHandles, APeerThatStallsOrLiesCostsOnlyItsConnection) {
  Exporter ex;
  std::vector<uint8_t> h;
  ASSERT_EQ(ex.handles.publish(kPhysical, 7, memory(4096, 'q'), 4096, 4096, h), cu::kSuccess);
  std::string path = exporterSocket();
  ASSERT_FALSE(path.empty());

  int silent = connectTo(path);
  int liar = connectTo(path);
  std::vector<uint8_t> wrong(IpcRegistry::kHandleBytes, 0x41);
  ASSERT_EQ(write(liar, wrong.data(), wrong.size()), static_cast<ssize_t>(wrong.size()));
  int shorter = connectTo(path);
  ASSERT_EQ(write(shorter, h.data(), 20), 20);
  shutdown(shorter, SHUT_WR);

  IpcRegistry other;
  ShareableHandles importer(other);
  int fd = -1;
  uint64_t bytes = 0;
  ASSERT_EQ(importer.open(h, kPhysical, fd, bytes), cu::kSuccess) << "served while the silent peer still holds its connection";
  EXPECT_EQ(firstByte(fd), 'q');
  close(fd);

  uint8_t status = 0;
  char control[CMSG_SPACE(sizeof(int))];
  iovec iov{&status, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ASSERT_EQ(recvmsg(liar, &msg, 0), 1);
  EXPECT_EQ(status, 1) << "a handle nobody filed is answered no";
  EXPECT_EQ(CMSG_FIRSTHDR(&msg), nullptr) << "and carries no descriptor";
  EXPECT_EQ(read(shorter, &status, 1), 0) << "a short handle is not answered";
  EXPECT_EQ(read(silent, &status, 1), 0) << "the silent peer was dropped";
  close(silent);
  close(liar);
  close(shorter);
}

// An importer's hold on an export (import_holds.h) ends only when it lets go; the exporter learns that from
// the record it withdrew. CUDA hands the same address out again for a handle opened twice, and counts: so
// does the worker, which keeps it held and the range the client's until the second close.
TEST(ImportHolds, AnExportImportedTwiceIsHeldUntilLetGoTwice) {
  IpcRegistry exporter, importer;
  std::vector<uint8_t> handle, record;
  ASSERT_EQ(exporter.publish(IpcRegistry::Kind::kMemory, {1, 2, 3}, handle), cu::kSuccess);
  gpool::worker::ImportHolds holds;
  for (int i = 0; i < 2; ++i) {
    IpcRegistry::RecordFile hold;
    ASSERT_EQ(importer.lookupHeld(IpcRegistry::Kind::kMemory, handle, record, hold), cu::kSuccess);
    EXPECT_EQ(record, (std::vector<uint8_t>{1, 2, 3}));
    holds.keep(gpool::worker::Shared::kAllocation, 0x1000, std::move(hold));
  }
  IpcRegistry::RecordFile withdrawn = exporter.withdraw(handle);
  ASSERT_TRUE(withdrawn) << "held by its importer";
  IpcRegistry::RecordFile late;
  EXPECT_EQ(importer.lookupHeld(IpcRegistry::Kind::kMemory, handle, record, late), cu::kInvalidValue) << "withdrawn";
  holds.letGo(gpool::worker::Shared::kAllocation, 0x1000);
  EXPECT_FALSE(withdrawn.unheld()) << "opened twice, closed once";
  holds.letGo(gpool::worker::Shared::kAllocation, 0x1000);
  EXPECT_TRUE(withdrawn.unheld());

  gpool::worker::HandleTable table;
  table.openIpc(0x1000, 4096);
  table.openIpc(0x1000, 4096);
  table.closeIpc(0x1000);
  EXPECT_TRUE(table.findRange(0x1000, 4096)) << "opened twice, closed once: still the client's";
  table.closeIpc(0x1000);
  EXPECT_FALSE(table.findRange(0x1000, 4096));
}
