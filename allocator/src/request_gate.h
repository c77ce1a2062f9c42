// Where gpool-allocator's connections wait without a thread: for their TLS handshake, for a request to
// arrive whole, between the requests of a kept-alive connection, and for their client to take the rest of
// an answer the socket did not take at once. One thread accepts and watches them all (epoll); a connection
// takes a thread of the pool only once a whole request is in, for the time it is answered, and comes back
// here afterwards. So a slow client, sending or reading, costs a descriptor and its bytes, not a thread,
// whatever number of addresses its crowd comes from.
// - one client address holds at most its share of the connections (gpool/peer_connections.h,
//   --max-connections-per-address); another from it is closed at once, and its client tries again;
// - a TLS handshake, then each request, must arrive whole within kRequestDeadline of its first byte
//   (connection_stream.h), and each answer be taken within kWriteDeadline of its first write; a connection
//   waits at most the keep-alive timeout for its next request;
// - a connection closes once its client has taken its last answer (not while the kernel still holds some
//   of it, to send after the close); one closed with an answer its client has not taken is reset;
// - with every connection held (--max-connections), a new one takes the place of a connection waiting here
//   (for its request, or to send its answer's rest), of the client with the most waiting
//   (displacement_order.h); only when all are being answered does it wait in the listen backlog;
// - a client that has spent its share of the allocator's CPU (client_cpu.h, --max-client-cpu, and its
//   part of --max-client-cpu-total) has its whole requests and TLS handshakes wait here, holding no
//   thread, until its share paid off what it owes.
#pragma once

#include <httplib.h>
#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <string>
#include <string_view>
#include <vector>

#include "client_cpu.h"
#include "connection_stream.h"
#include "displacement_order.h"
#include "gpool/peer_connections.h"
#include "unread_answers.h"

namespace gpool::allocator {

class RequestGate {
 public:
  struct Options {
    size_t max_connections = 4096;  // held at once: waiting here and being answered
    std::chrono::seconds keep_alive{5};
    size_t keep_alive_requests = 5;  // requests one connection may send; it is closed after the last
    SSL_CTX* tls = nullptr;          // TLS is spoken when given
    // Whose share a connection counts in, or "" to close it; by default its client's address (peerOf).
    std::function<std::string(int fd)> identify;
    // What requests say their local address is, and their peer's the share they count in; "" (TCP) reads
    // both from the socket.
    std::string local_name;
    std::string share_name = "--max-connections-per-address";  // named when a connection is closed for it
    size_t max_unread = size_t{1} << 30;  // bytes of answers not read yet held at once (unread_answers.h)
    std::shared_ptr<ClientCpu> client_cpu;  // each client's share of the CPU, one for every listener (none: any)
  };
  // Answers one whole request in `stream`, on a pool thread; whether the connection stays open after it.
  // `last`: it is the connection's last (its answer says so).
  using Answer = std::function<bool(ConnectionStream& stream, bool last)>;

  RequestGate(int listen_fd, std::shared_ptr<PeerConnections> peers, httplib::TaskQueue& pool, Options opt, Answer answer);
  ~RequestGate();
  // Accepts and watches connections until stop() (at once if it came first); then closes those waiting
  // for a request, and sends the answers being given for up to 5 s more (until their clients took them).
  void run();
  void stop();
  uint64_t displaced() const { return displaced_; }  // connections closed to make room for a new one
  uint64_t dropped() const { return dropped_; }      // answers dropped past max_unread (their connections reset)
  uint64_t heldBack() const { return held_back_; }   // requests and handshake steps that waited for their client's CPU share
  // On a pool thread, while Answer runs: how long the request being answered waited for its client's CPU
  // share (its first on a connection handed over after waiting; 0 for the others).
  static std::chrono::milliseconds heldBeforeAnswer();

  // The connections the open-file limit (RLIMIT_NOFILE) leaves room for, beside what the allocator
  // keeps open otherwise: the database, keys, logs, munged, the local socket's connections.
  static size_t descriptorBudget();
  static constexpr size_t kReservedDescriptors = 64 + 256, kMinBudget = 16;

 private:
  struct Connection;
  using Clock = ConnectionStream::Clock;

  void turn();
  void drain();
  void accept();
  bool full() const;
  void displace();
  Connection& hold(std::unique_ptr<Connection> c);
  void rank(Connection& c);
  std::unique_ptr<Connection> letGo(int fd);
  void admit(int fd, std::string peer);
  void progress(Connection& c);
  template <typename Step>
  void charged(std::string peer, Step&& step);
  void send(Connection& c);
  void waitForNext(Connection& c);
  void handshake(Connection& c);
  static bool recordWaiting(int fd);
  bool shakeHands(Connection& c);
  enum class Read { kDrained, kClosed, kFull };
  Read readNow(Connection& c, uint32_t* want);
  void receive(Connection& c);
  bool nextArrives(Connection& c);
  void sendNow(Connection& c, std::string_view text);
  void dispatch(int fd);
  void holdBack(Connection& c);
  void release();
  int turnMs() const;
  void work(std::unique_ptr<Connection> c);
  void answer(Connection& c);
  void comeBack(std::unique_ptr<Connection> c);
  void takeBack();
  void resume(std::unique_ptr<Connection> c);
  void watch(Connection& c, uint32_t events);
  void unwatch(Connection& c);
  void close(int fd);
  void closeWhenTaken(Connection& c);
  void countUnread(Connection& c);
  void dropUnread();
  void sweep();

  int listen_fd_, epoll_fd_ = -1, wake_fd_ = -1;
  std::shared_ptr<PeerConnections> peers_;
  httplib::TaskQueue& pool_;
  Options opt_;
  Answer answer_;
  std::map<int, std::unique_ptr<Connection>> waiting_;  // by descriptor: those watched here
  DisplacementOrder order_;                              // of those watched here
  std::atomic<size_t> answering_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> displaced_{0}, dropped_{0}, held_back_{0};
  UnreadAnswers unread_;                                 // of those watched here
  std::shared_ptr<ClientCpu> cpu_;
  std::set<std::pair<Clock::time_point, int>> held_;     // (since when, descriptor) of those held back for cpu_
  std::unordered_map<std::string, size_t> held_of_;      // of them, each client's
  Clock::time_point next_release_ = Clock::time_point::max();  // when the first of held_ may go on
  Clock::time_point warned_{};                           // when holding back was last logged
  bool accepting_ = true;
  Clock::time_point next_sweep_{};
  std::mutex back_mu_;  // guards what follows: connections answered, coming back from the pool's threads
  std::vector<std::unique_ptr<Connection>> back_;
  bool stopped_ = false;
};

}  // namespace gpool::allocator
