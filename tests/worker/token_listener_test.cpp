// The one-shot listeners a worker opens beside a client's connection (host functions, the move to shared
// memory, peer links): whoever else reaches them must not keep the client out. The port is open to the
// network and the abstract socket's name is listed in /proc/net/unix, so anyone may connect first.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpool/protocol/shm_transport.h"
#include "gpool/protocol/transport.h"
#include "token_listener.h"

using namespace gpool;

namespace {

// A connection to the listener's abstract socket that never blocks: -1 when the listener's queue is full.
int knock(const std::string& name) {
  sockaddr_un addr;
  socklen_t len = 0;
  if (!proto::abstractSocketAddress(name, addr, len)) return -1;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void sendBytes(int fd, const void* p, size_t n) { ASSERT_EQ(::send(fd, p, n, MSG_NOSIGNAL), static_cast<ssize_t>(n)); }

// Whether `accepted` is the other end of `client`: a byte written on one arrives on the other.
bool sameConnection(int accepted, int client) {
  char x = 'x', y = 0;
  if (::send(accepted, &x, 1, MSG_NOSIGNAL) != 1) return false;
  pollfd p{client, POLLIN, 0};
  return ::poll(&p, 1, 2000) == 1 && ::recv(client, &y, 1, 0) == 1 && y == 'x';
}

// A listener on an abstract socket, open.
class LocalListener : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(listener.openLocal(name, token), 0); }
  worker::TokenListener listener;
  std::string name;
  std::vector<uint8_t> token;
};

}  // namespace

// Two connections ahead of the client, one silent and one that sends half a token and stops: the client
// with the token is taken at once, not after each of them has had its time to speak.
TEST_F(LocalListener, ConnectionsThatSayNothingDoNotHoldUpTheClient) {
  int silent = knock(name), halting = knock(name), client = knock(name);
  ASSERT_GE(silent, 0);
  ASSERT_GE(halting, 0);
  ASSERT_GE(client, 0);
  sendBytes(halting, token.data(), token.size() / 2);
  sendBytes(client, token.data(), token.size());
  // Within 3 s: each intruder alone would have been given its 5 s (kTokenWaitMs) before the client.
  int accepted = listener.acceptFd(3000, "test listener");
  ASSERT_GE(accepted, 0) << "the client was kept out";
  EXPECT_TRUE(sameConnection(accepted, client));
  for (int fd : {silent, halting, client, accepted}) ::close(fd);
}

// The same over TCP, where the port is open to every host that can reach the worker.
TEST(TokenListener, OverTcpASilentConnectionDoesNotHoldUpTheClient) {
  worker::TokenListener listener;
  uint32_t port = 0;
  std::vector<uint8_t> token;
  ASSERT_EQ(listener.open(port, token), 0);
  std::string address = "127.0.0.1:" + std::to_string(port);
  auto silent = proto::connectTcp(address);
  auto client = proto::connectTcp(address);
  proto::ConstBuffer b{token.data(), token.size()};
  client->send(std::span(&b, 1));
  std::unique_ptr<proto::Transport> accepted = listener.accept(3000, "test listener");
  ASSERT_NE(accepted, nullptr) << "the client was kept out";
  char x = 'x', y = 0;
  proto::ConstBuffer xb{&x, 1};
  accepted->send(std::span(&xb, 1));
  client->recv(&y, 1);
  EXPECT_EQ(y, 'x');
}

// Connections queued before the worker looks (a host-function channel is taken when the first function
// is due): more than a few of them must not fill the queue against the client.
TEST_F(LocalListener, QueuedConnectionsDoNotFillItsQueue) {
  std::vector<int> intruders;
  for (int i = 0; i < 16; ++i) intruders.push_back(knock(name));
  for (int fd : intruders) ASSERT_GE(fd, 0) << "the listener's queue is full after " << intruders.size() << " connections";
  int client = knock(name);
  ASSERT_GE(client, 0) << "the listener's queue is full: the client cannot connect";
  sendBytes(client, token.data(), token.size());
  int accepted = listener.acceptFd(3000, "test listener");
  ASSERT_GE(accepted, 0);
  EXPECT_TRUE(sameConnection(accepted, client));
  for (int fd : intruders) ::close(fd);
  ::close(client);
  ::close(accepted);
}

// A wrong token is refused and the listener goes on waiting; once one connection is taken the listener is
// closed, and the rest are dropped.
TEST_F(LocalListener, AWrongTokenIsRefusedAndTheRestDroppedOnceTheClientCame) {
  int wrong = knock(name), client = knock(name), late = knock(name);
  std::vector<uint8_t> bad(token.size(), 0);
  sendBytes(wrong, bad.data(), bad.size());
  sendBytes(client, token.data(), token.size());
  int accepted = listener.acceptFd(3000, "test listener");
  ASSERT_GE(accepted, 0);
  EXPECT_TRUE(sameConnection(accepted, client));
  char c;
  pollfd p{wrong, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1);
  EXPECT_EQ(::recv(wrong, &c, 1, 0), 0);  // closed by the worker
  p = {late, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1);
  EXPECT_LE(::recv(late, &c, 1, 0), 0);  // dropped with the listener
  EXPECT_LT(knock(name), 0);              // nobody listens any more
  EXPECT_FALSE(listener.isOpen());
  for (int fd : {wrong, client, late, accepted}) ::close(fd);
}
