// One accepted connection of gpool-allocator (TCP, TLS over TCP, or the local Unix socket) as httplib's
// Stream, with the time limits a peer is held to: each request must arrive whole within kRequestDeadline
// of startRequest() (httplib bounds each read only, so a byte every few seconds held a thread for ever),
// and each answer must be taken within kWriteDeadline. The socket is non-blocking; reads are buffered
// (httplib reads a request's lines a byte at a time). A connection's request has arrived whole before the
// stream is made (request_gate.h): the stream starts with it buffered, and hands back what it left unread.
// Writes do not wait either: what the socket does not take at once is kept, and handed back (unsent()) for
// the gate to send as the client reads it, so a client that does not read its answer holds no thread.
#pragma once

#include <httplib.h>
#include <openssl/ssl.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>

namespace gpool::allocator {

constexpr auto kRequestDeadline = std::chrono::seconds(10);  // a TLS handshake, or a request, to arrive whole
constexpr auto kWriteDeadline = std::chrono::seconds(30);    // an answer, to be taken by a slow reader

class ConnectionStream : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;
  // `ssl`: a TLS session over `fd` whose handshake is done, or nullptr. `remote`/`local`: what requests
  // say their peer and local addresses are; "" reads them from the socket. `received`: what was read from
  // the connection already, read before anything more.
  ConnectionStream(int fd, SSL* ssl, std::string remote = "", std::string local = "", std::string received = "");

  // The next request: it must arrive whole by `by`.
  void startRequest(Clock::time_point by = Clock::now() + kRequestDeadline);
  bool late() const { return late_; }  // a read waited out its deadline, or a wait for data its step
  std::string unread() { return buf_.substr(head_); }  // what came in and was not read (a next request)
  std::string unsent() { return std::exchange(out_, {}); }  // what was written and the socket did not take yet
  // When what unsent() hands back must have been taken by the client: kWriteDeadline from the first write.
  Clock::time_point sendBy() const { return write_by_.value_or(Clock::now() + kWriteDeadline); }

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = remote_, port = remote_port_; }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip = local_, port = local_port_; }
  socket_t socket() const override { return fd_; }

  // The numeric address of `fd`'s peer; "" when it has none (it went away).
  static std::string peerAddress(int fd, int* port = nullptr);
  // Whether `fd` became ready for `events` within `ms` (a hang-up counts: the read or write then says so).
  static bool ready(int fd, short events, int ms);
  static int msUntil(Clock::time_point t, int most);
  // What OpenSSL waits for after a call on `ssl` returned `result`: POLLIN, POLLOUT, or 0 (an error, the end).
  static short wanted(SSL* ssl, int result);
  // One read from `fd` (through `ssl` when given) that does not wait: the bytes read (> 0), 0 when the peer
  // closed, -1 on an error, or kWouldBlock when nothing is there now (`*want` then says what to wait for).
  static ssize_t readOnce(int fd, SSL* ssl, char* into, size_t size, short* want);
  // One write to `fd` (through `ssl`) that does not wait, likewise: the bytes taken (> 0), -1 on an error,
  // or kWouldBlock. A TLS write is repeated with the same bytes first (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
  // lets them lie elsewhere), and more may follow them.
  static ssize_t writeOnce(int fd, SSL* ssl, const char* from, size_t size, short* want);
  static constexpr ssize_t kWouldBlock = -2;
  static constexpr int kStepMs = 5000;  // each wait of a read or write (httplib's own)

 private:
  bool buffered() const;
  bool fill();
  ssize_t receive(char* into, size_t size);

  int fd_;
  SSL* ssl_;
  std::string remote_, local_;
  int remote_port_ = 0, local_port_ = 0;
  Clock::time_point read_by_;
  std::optional<Clock::time_point> write_by_;
  std::string buf_;
  size_t head_ = 0;
  std::string out_;  // written, not yet taken by the socket
  ssize_t filled_ = -1;  // what read() returns once fill() failed: 0 the peer closed, -1 an error or too late
  bool late_ = false;
};

}  // namespace gpool::allocator
