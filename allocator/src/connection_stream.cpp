#include "connection_stream.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace gpool::allocator {
namespace {

constexpr size_t kReadSize = 16384;  // one read's most (a TLS record)

std::string numeric(const sockaddr_storage& a, socklen_t len, int* port) {
  char host[NI_MAXHOST] = {}, serv[NI_MAXSERV] = {};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "";
  if (port) *port = std::atoi(serv);
  return host;
}

std::string localAddress(int fd, int* port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 ? numeric(a, len, port) : "";
}

}  // namespace

std::string ConnectionStream::peerAddress(int fd, int* port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  return ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 ? numeric(a, len, port) : "";
}

bool ConnectionStream::ready(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  int r;
  do r = ::poll(&p, 1, ms);
  while (r < 0 && errno == EINTR);
  return r > 0;
}

int ConnectionStream::msUntil(Clock::time_point t, int most) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, most));
}

ConnectionStream::ConnectionStream(int fd, SSL* ssl, std::string remote, std::string local, std::string received)
    : fd_(fd), ssl_(ssl), remote_(std::move(remote)), local_(std::move(local)), buf_(std::move(received)) {
  if (remote_.empty()) remote_ = peerAddress(fd, &remote_port_);
  if (local_.empty()) local_ = localAddress(fd, &local_port_);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  startRequest();
}

void ConnectionStream::startRequest(Clock::time_point by) {
  read_by_ = by;
  write_by_.reset();
}

bool ConnectionStream::buffered() const { return head_ < buf_.size() || (ssl_ && SSL_pending(ssl_) > 0); }

bool ConnectionStream::is_readable() const { return buffered() || ready(fd_, POLLIN, msUntil(read_by_, kStepMs)); }

bool ConnectionStream::is_writable() const { return ready(fd_, POLLOUT, kStepMs); }

short ConnectionStream::wanted(SSL* ssl, int result) {
  int e = SSL_get_error(ssl, result);
  return e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (head_ == buf_.size() && !fill()) return filled_;
  size_t n = std::min(size, buf_.size() - head_);
  std::memcpy(ptr, buf_.data() + head_, n);
  head_ += n;
  return static_cast<ssize_t>(n);
}

// Reads what has come into the buffer; false when the peer closed (filled_ 0), or on an error or when
// nothing came in time (filled_ -1).
bool ConnectionStream::fill() {
  head_ = 0;
  buf_.resize(kReadSize);
  ssize_t n = receive(buf_.data(), buf_.size());
  buf_.resize(n > 0 ? static_cast<size_t>(n) : 0);
  if (n <= 0) filled_ = n;
  return n > 0;
}

ssize_t ConnectionStream::readOnce(int fd, SSL* ssl, char* into, size_t size, short* want) {
  *want = POLLIN;
  if (ssl) {
    ERR_clear_error();  // SSL_get_error reads this thread's queue: only this call's errors may be in it
    int r = SSL_read(ssl, into, static_cast<int>(std::min<size_t>(size, INT_MAX)));
    if (r > 0) return r;
    if (SSL_get_error(ssl, r) == SSL_ERROR_ZERO_RETURN) return 0;
    return (*want = wanted(ssl, r)) ? kWouldBlock : -1;
  }
  ssize_t n = ::recv(fd, into, size, 0);
  if (n >= 0) return n;
  return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK ? kWouldBlock : -1;
}

// One read of at most `size` bytes by the read deadline: what came (> 0), 0 when the peer closed, -1 on an
// error or when nothing came in time.
ssize_t ConnectionStream::receive(char* into, size_t size) {
  for (;;) {
    if (Clock::now() >= read_by_) return late_ = true, -1;
    short want;
    ssize_t n = readOnce(fd_, ssl_, into, size, &want);
    if (n != kWouldBlock) return n;
    if (!ready(fd_, want, msUntil(read_by_, kStepMs))) return late_ = true, -1;
  }
}

ssize_t ConnectionStream::writeOnce(int fd, SSL* ssl, const char* from, size_t size, short* want) {
  *want = POLLOUT;
  if (ssl) {
    ERR_clear_error();
    int r = SSL_write(ssl, from, static_cast<int>(std::min<size_t>(size, INT_MAX)));
    if (r > 0) return r;
    return (*want = wanted(ssl, r)) ? kWouldBlock : -1;
  }
  ssize_t n = ::send(fd, from, size, MSG_NOSIGNAL);
  if (n >= 0) return n;
  return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK ? kWouldBlock : -1;
}

// Writes what the socket takes now; the rest is kept for unsent(), and taken as written.
ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (!write_by_) write_by_ = Clock::now() + kWriteDeadline;
  if (out_.empty()) {
    short want;
    ssize_t n = writeOnce(fd_, ssl_, ptr, size, &want);
    if (n != kWouldBlock) return n;
  }
  out_.append(ptr, size);
  return static_cast<ssize_t>(size);
}

}  // namespace gpool::allocator
