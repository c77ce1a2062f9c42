#include "request_gate.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

#include "request_arrival.h"

namespace gpool::allocator {
namespace {

constexpr int kSweepMs = 200;          // how often deadlines are looked at
constexpr int kAcceptsPerTurn = 64;    // then the connections watched have their turn
constexpr size_t kReadSize = 16384;    // one read's most (a TLS record)
constexpr size_t kMaxRecord = 5 + 16384 + 2048;  // a TLS record's header and its most ciphertext
constexpr auto kLinger = std::chrono::milliseconds(1);  // a thread waits this long for a connection's next request
constexpr int64_t kLingerCpuNs = 2'000'000;  // ... while what it answered of the connection cost it less CPU than this
constexpr auto kDrain = std::chrono::seconds(5);  // answers go on after stop() for this long at most
const std::string kTooLargeBody = "{\"error\": \"a request's body may be at most 1 MiB\"}\n";
const std::string kTooLarge = "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nConnection: close\r\n"
                              "Content-Length: " + std::to_string(kTooLargeBody.size()) + "\r\n\r\n" + kTooLargeBody;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// What `fd`'s client has not taken yet of what was written to it (sent, and not acknowledged; or in the
// queue of a local socket, unread). Nothing, once a TCP connection was reset: no more of it goes out.
int untaken(int fd) {
  int n = 0;
  if (::ioctl(fd, SIOCOUTQ, &n) != 0 || n <= 0) return 0;
  tcp_info info{};
  socklen_t len = sizeof info;
  return ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE ? 0 : n;
}

thread_local std::chrono::nanoseconds t_held{0};  // heldBeforeAnswer()

// The CPU time the calling thread has used.
int64_t threadCpuNs() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

}  // namespace

struct RequestGate::Connection {
  // kSending: the rest of its answer waits for room in the socket. kClosing: its last answer is in the socket,
  // and it closes once the client has taken it.
  enum class Phase { kHandshake, kRequest, kIdle, kSending, kClosing };
  Connection(int f, std::string p, PeerConnections& peers) : fd(f), peer(std::move(p)), peers_(peers) {}
  // An answer its client has not taken is dropped with a reset. Closed in order, the kernel would go on
  // sending it, for minutes, to a client that may never read it: memory the allocator no longer holds
  // to account.
  ~Connection() {
    bool abandoned = phase == Phase::kSending || (phase != Phase::kHandshake && untaken(fd) > 0);
    if (ssl) {
      if (phase != Phase::kHandshake && phase != Phase::kClosing && !abandoned) SSL_shutdown(ssl);  // best effort
      ERR_clear_error();  // what a failed shutdown left
      SSL_free(ssl);
    }
    if (abandoned) {
      linger reset{1, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    }
    ::close(fd);
    peers_.release(peer);
  }
  int fd;
  std::string peer;  // whose share it counts in
  SSL* ssl = nullptr;
  std::string received;        // of the next request
  std::string outgoing;        // of its answer, what the socket has not taken yet (kSending)
  size_t sent = 0;             // of outgoing, what it has taken since
  Phase phase = Phase::kRequest;
  Clock::time_point since, by;  // waiting here since; the deadline of what it waits for
  Clock::time_point taken_by;   // when its client must have taken its last answer
  size_t answered = 0;
  uint32_t watched = 0;  // the events epoll watches for it (0: not watched)
  uint32_t want = EPOLLIN;  // what its TLS handshake's next step waits for
  bool keep = true;      // once answered: whether it stays open
  bool continued = false;  // its request, announced by "Expect: 100-continue", was told to go on
  bool held = false;       // held back until its client's CPU share allows (its request, or handshake step, is whole)
  Clock::time_point held_since{};
  int64_t reserved_ns = 0, used_ns = 0;  // of its client's CPU share, for what a thread does for it (ClientCpu)
  Clock::duration waited{};              // held back for its client's share, before it went to a thread

 private:
  PeerConnections& peers_;
};

std::chrono::milliseconds RequestGate::heldBeforeAnswer() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t_held);
}

size_t RequestGate::descriptorBudget() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  return r.rlim_cur > kReservedDescriptors + kMinBudget ? static_cast<size_t>(r.rlim_cur - kReservedDescriptors) : kMinBudget;
}

// Runs `step`, the gate's own work for a connection of `peer` (reading its request, sending the rest of an
// answer, accepting, closing): its CPU time is owed by that client. `peer` is a copy: the connection may
// be gone after `step`.
template <typename Step>
void RequestGate::charged(std::string peer, Step&& step) {
  if (!cpu_->limited()) return step();
  int64_t start = threadCpuNs();
  step();
  cpu_->charge(peer, threadCpuNs() - start, Clock::now());
}

RequestGate::RequestGate(int listen_fd, std::shared_ptr<PeerConnections> peers, httplib::TaskQueue& pool, Options opt, Answer answer)
    : listen_fd_(listen_fd), peers_(std::move(peers)), pool_(pool), opt_(opt), answer_(std::move(answer)), unread_(opt.max_unread),
      cpu_(opt.client_cpu ? opt.client_cpu : std::make_shared<ClientCpu>(0)) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) throw std::runtime_error(std::string("cannot watch connections: ") + std::strerror(errno));
  ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);  // accept() takes what is there
  epoll_event e{EPOLLIN, {.fd = wake_fd_}};
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &e);
  e.data.fd = listen_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &e);
}

RequestGate::~RequestGate() {
  waiting_.clear();
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

void RequestGate::stop() {
  stopping_ = true;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void RequestGate::run() {
  while (!stopping_) turn();
  drain();
  waiting_.clear();  // closes them
  order_ = {};
  std::lock_guard lock(back_mu_);
  stopped_ = true;
  answering_ -= back_.size();
  back_.clear();
}

// One turn: what epoll says is ready, then the deadlines, then whether to accept again.
void RequestGate::turn() {
  epoll_event events[256];
  int n = ::epoll_wait(epoll_fd_, events, 256, turnMs());
  for (int i = 0; i < n; ++i) {
    int fd = events[i].data.fd;
    if (fd == listen_fd_) {
      if (!stopping_) accept();
    } else if (fd == wake_fd_) {
      takeBack();
    } else if (auto it = waiting_.find(fd); it != waiting_.end()) {
      Connection& c = *it->second;
      charged(c.peer, [&] { progress(c); });
    }
  }
  if (Clock::now() >= next_sweep_) sweep();
  if (Clock::now() >= next_release_) release();
  if (!stopping_ && !accepting_ && (!full() || !waiting_.empty())) {  // room again, or one to displace
    epoll_event e{EPOLLIN, {.fd = listen_fd_}};
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &e);
    accepting_ = true;
  }
}

// After stop(): nothing more is accepted, and connections waiting for a request close; the answers being
// given, and what their clients have not taken yet of those given, go on for up to kDrain.
void RequestGate::drain() {
  if (accepting_) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
  accepting_ = false;
  for (auto until = Clock::now() + kDrain;;) {
    std::vector<int> waiting;
    for (const auto& [fd, c] : waiting_)
      if (c->phase != Connection::Phase::kSending && c->phase != Connection::Phase::kClosing) waiting.push_back(fd);
    for (int fd : waiting) closeWhenTaken(*waiting_.at(fd));
    if ((waiting_.empty() && answering_ == 0) || Clock::now() >= until) return;
    turn();
  }
}

// Accepts what the listen backlog holds, as long as there is room (each costs a descriptor). With every
// connection held, a new one takes the place of a waiting one (displacement_order.h); with all of them
// being answered, none is accepted until one ends.
void RequestGate::accept() {
  for (int i = 0; i < kAcceptsPerTurn; ++i) {
    if (full() && waiting_.empty()) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      accepting_ = false;
      return;
    }
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        spdlog::warn("cannot accept a connection: out of descriptors ({}); trying again in 100 ms", std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      return;
    }
    std::string peer = opt_.identify ? opt_.identify(fd) : PeerConnections::peerOf(ConnectionStream::peerAddress(fd));
    if (peer.empty() || !peers_->admit(peer)) {
      if (!peer.empty() && peers_->warnNow())
        spdlog::warn("closed a connection from {}: it holds {} already ({}); {} closed so far", peer,
                     peers_->perPeer(), opt_.share_name, peers_->refused.load());
      ::close(fd);
      continue;
    }
    if (full()) displace();
    charged(peer, [&] { admit(fd, peer); });
  }
}

bool RequestGate::full() const { return waiting_.size() + answering_ >= opt_.max_connections; }

void RequestGate::displace() {
  int fd = *order_.next();
  if (waiting_.at(fd)->phase != Connection::Phase::kIdle || untaken(fd) > 0) ++displaced_;  // it lost a request or an answer
  close(fd);
}

// Watches `c` here, in the order of displacement.
RequestGate::Connection& RequestGate::hold(std::unique_ptr<Connection> c) {
  Connection& ref = *c;
  rank(ref);
  waiting_.emplace(ref.fd, std::move(c));
  return ref;
}

// Where `c` stands in the order of displacement: by whether it is idle, and since when it waits.
void RequestGate::rank(Connection& c) {
  order_.add(c.fd, c.peer, {c.phase != Connection::Phase::kIdle, c.since.time_since_epoch().count()});
}

std::unique_ptr<RequestGate::Connection> RequestGate::letGo(int fd) {
  auto it = waiting_.find(fd);
  if (it == waiting_.end()) return nullptr;
  std::unique_ptr<Connection> c = std::move(it->second);
  waiting_.erase(it);
  order_.remove(fd);
  unread_.remove(fd);
  if (std::exchange(c->held, false)) {
    held_.erase({c->held_since, fd});
    if (auto of = held_of_.find(c->peer); --of->second == 0) held_of_.erase(of);
  }
  return c;
}

void RequestGate::admit(int fd, std::string peer) {
  int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);  // answers go out in several writes
  auto c = std::make_unique<Connection>(fd, std::move(peer), *peers_);
  c->since = Clock::now();
  c->by = c->since + kRequestDeadline;
  if (opt_.tls) {
    c->phase = Connection::Phase::kHandshake;
    if (!(c->ssl = SSL_new(opt_.tls)) || SSL_set_fd(c->ssl, fd) != 1) return;
    SSL_set_mode(c->ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);  // an answer's rest is sent from another buffer
  }
  progress(hold(std::move(c)));  // its first bytes may be here already
}

void RequestGate::unwatch(Connection& c) {
  if (c.watched) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  c.watched = 0;
}

void RequestGate::watch(Connection& c, uint32_t events) {
  if (c.watched == events) return;
  epoll_event e{events, {.fd = c.fd}};
  ::epoll_ctl(epoll_fd_, c.watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &e);
  c.watched = events;
}

void RequestGate::progress(Connection& c) {
  if (c.phase == Connection::Phase::kHandshake) return handshake(c);
  if (c.phase == Connection::Phase::kSending) return send(c);
  watch(c, EPOLLIN);
  receive(c);
}

// Sends what the socket takes of an answer's rest. Once it is all taken, the connection waits for its next
// request (or closes, after its last).
void RequestGate::send(Connection& c) {
  while (c.sent < c.outgoing.size()) {
    short want;
    ssize_t n = ConnectionStream::writeOnce(c.fd, c.ssl, c.outgoing.data() + c.sent, c.outgoing.size() - c.sent, &want);
    if (n == ConnectionStream::kWouldBlock) {
      countUnread(c);
      return watch(c, want == POLLIN ? EPOLLIN : EPOLLOUT);
    }
    if (n < 0) return close(c.fd);
    c.sent += static_cast<size_t>(n);
  }
  c.outgoing = {};
  c.sent = 0;
  if (!c.keep) {
    countUnread(c);  // what its socket holds still
    return closeWhenTaken(c);
  }
  std::unique_ptr<Connection> sent = letGo(c.fd);  // to be held again, where a waiting connection ranks
  waitForNext(*sent);
  Connection& ref = hold(std::move(sent));
  countUnread(ref);
  watch(ref, EPOLLIN);
  receive(ref);  // a request that came with the last one
}

// The TLS handshake's work (its key exchange and signature) is done on a pool thread, not here: a step of
// it is handed over once what it waits for is here (a whole TLS record from the client, or room to write).
// Meanwhile the connection is watched edge-triggered, since its bytes stay in the socket, only peeked at.
void RequestGate::handshake(Connection& c) {
  if (c.want == EPOLLOUT || recordWaiting(c.fd)) return dispatch(c.fd);
  watch(c, EPOLLIN | EPOLLET);
}

// Whether a whole TLS record has come on `fd` (or what came is no record, or the client closed or failed:
// the handshake's next step then ends it at once).
bool RequestGate::recordWaiting(int fd) {
  unsigned char header[5];
  ssize_t n = ::recv(fd, header, sizeof header, MSG_PEEK);
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  if (n == 0) return true;
  if (n < static_cast<ssize_t>(sizeof header)) return false;
  size_t whole = sizeof header + (size_t{header[3]} << 8 | header[4]);
  int here = 0;
  return ::ioctl(fd, FIONREAD, &here) != 0 || static_cast<size_t>(here) >= whole || whole > kMaxRecord;
}

// On a pool thread: a step of the TLS handshake; whether it is done. Otherwise c.want says what the next
// step waits for (c.keep is false once it failed).
bool RequestGate::shakeHands(Connection& c) {
  ERR_clear_error();  // SSL_get_error reads this thread's queue: only this call's errors may be in it
  int r = SSL_accept(c.ssl);
  if (r == 1) {
    c.phase = Connection::Phase::kRequest;
    c.by = Clock::now() + kRequestDeadline;
    c.want = EPOLLIN;
    return true;
  }
  short want = ConnectionStream::wanted(c.ssl, r);
  c.keep = want != 0;
  c.want = want == POLLOUT ? EPOLLOUT : EPOLLIN;
  return false;
}

// Reads what has come without waiting for more: kDrained once the socket (or TLS) has nothing more now and
// waits for `*want`, kClosed when the client closed it or it failed, kFull past a head and body at their largest.
RequestGate::Read RequestGate::readNow(Connection& c, uint32_t* want) {
  char chunk[kReadSize];
  for (;;) {
    short wanted;
    ssize_t n = ConnectionStream::readOnce(c.fd, c.ssl, chunk, sizeof chunk, &wanted);
    if (n == ConnectionStream::kWouldBlock) {
      *want = wanted == POLLOUT ? EPOLLOUT : EPOLLIN;
      return Read::kDrained;
    }
    if (n <= 0) return Read::kClosed;
    if (c.phase == Connection::Phase::kIdle) {  // a request's first bytes: it has its deadline from now
      c.phase = Connection::Phase::kRequest;
      c.continued = false;
      c.by = Clock::now() + kRequestDeadline;
    }
    c.received.append(chunk, static_cast<size_t>(n));
    if (c.received.size() > kMaxRequestHead + kMaxRequestBody) return Read::kFull;  // the rest waits its turn
  }
}

// Reads what has come, and hands the connection to a pool thread once a request is whole.
void RequestGate::receive(Connection& c) {
  bool idle = c.phase == Connection::Phase::kIdle;
  uint32_t want;
  Read read = readNow(c, &want);
  if (read == Read::kClosed) return close(c.fd);
  if (idle && c.phase != Connection::Phase::kIdle) {  // its next request began: it is no longer idle
    c.since = Clock::now();
    rank(c);
  }
  if (read == Read::kDrained) watch(c, want);
  switch (requestArrival(c.received)) {
    case Arrival::kPartial:
      return;
    case Arrival::kContinue:
      if (!std::exchange(c.continued, true)) sendNow(c, kContinue);
      return;
    case Arrival::kWhole:
      return dispatch(c.fd);
    case Arrival::kUnreadable:
      return close(c.fd);
    case Arrival::kBodyTooLarge:
      sendNow(c, kTooLarge);
      return close(c.fd);
  }
}

// Writes a short answer as far as the socket takes it at once (an empty socket takes it whole).
void RequestGate::sendNow(Connection& c, std::string_view text) {
  short want;
  ConnectionStream::writeOnce(c.fd, c.ssl, text.data(), text.size(), &want);
}

// Hands a connection whose request (or handshake step) is whole to a pool thread, if its client's CPU share
// allows; otherwise it waits here until it does. A client's requests go in the order they were held: a new
// one waits behind those held already, even once the share would allow it.
void RequestGate::dispatch(int fd) {
  auto now = Clock::now();
  Connection& here = *waiting_.at(fd);
  if (!cpu_->allows(here.peer, now) || (!here.held && held_of_.count(here.peer))) return holdBack(here);
  here.waited = here.held ? now - here.held_since : Clock::duration{};
  std::unique_ptr<Connection> c = letGo(fd);
  unwatch(*c);
  c->reserved_ns = cpu_->reserve(c->peer, now);
  ++answering_;
  Connection* raw = c.release();  // a std::function holds only what it can copy
  try {
    pool_.enqueue([this, raw] { work(std::unique_ptr<Connection>(raw)); });
  } catch (const std::exception& e) {  // the pool has no thread, and could make none
    spdlog::error("cannot answer a request: {}", e.what());
    --answering_;
    cpu_->settle(raw->peer, raw->reserved_ns, 0, now);
    delete raw;
  }
}

// `c`'s client owes CPU time: its whole request waits, unread past what came, until release().
void RequestGate::holdBack(Connection& c) {
  unwatch(c);
  if (c.held) return;
  auto now = Clock::now();
  c.held = true;
  c.held_since = now;
  held_.emplace(c.held_since, c.fd);
  ++held_of_[c.peer];
  ++held_back_;
  next_release_ = std::min(next_release_, cpu_->clearsAt(c.peer, now));
  if (now - warned_ >= std::chrono::seconds(10)) {
    warned_ = now;
    spdlog::warn("{} has used its share of the allocator's CPU ({:.3g} of a CPU now; --max-client-cpu {}, --max-client-cpu-total {} "
                 "for the {} clients asking): its requests wait for it; {} waited so far",
                 c.peer, cpu_->shareNow(), cpu_->share(), cpu_->total(), cpu_->clients(), held_back_.load());
  }
}

// The connections held back whose clients' shares allow them now go to threads, the longest held first.
void RequestGate::release() {
  auto now = Clock::now();
  next_release_ = Clock::time_point::max();
  for (auto it = held_.begin(); it != held_.end();) {
    Connection& c = *waiting_.at(it++->second);  // (dispatching it erases it from held_)
    if (cpu_->allows(c.peer, now)) charged(c.peer, [&] { dispatch(c.fd); });
    else next_release_ = std::min(next_release_, cpu_->clearsAt(c.peer, now));
  }
}

// How long epoll may wait this turn: until the sweep, or until a connection held back may go on.
int RequestGate::turnMs() const {
  if (next_release_ == Clock::time_point::max()) return kSweepMs;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(next_release_ - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, kSweepMs));
}

// On a pool thread: a step of the TLS handshake, or a whole request. A request is answered, and the next
// ones as long as each arrives whole within kLinger and those answered so far cost under kLingerCpu (a
// client sending one cheap request after another, or its first one right after its handshake, costs no
// trip through the gate; a costly next one goes back through the gate, where its client's CPU share is
// looked at); then the connection goes back, also with an answer the socket did not take whole.
void RequestGate::work(std::unique_ptr<Connection> c) {
  int64_t start = threadCpuNs();
  bool whole = c->phase != Connection::Phase::kHandshake || (shakeHands(*c) && nextArrives(*c));
  t_held = c->waited;
  while (whole) {
    answer(*c);
    t_held = {};
    whole = c->keep && c->phase != Connection::Phase::kSending && !stopping_ && threadCpuNs() - start < kLingerCpuNs &&
            nextArrives(*c);
  }
  c->used_ns = threadCpuNs() - start;
  comeBack(std::move(c));
}

void RequestGate::answer(Connection& c) {
  ConnectionStream stream(c.fd, c.ssl, opt_.local_name.empty() ? "" : c.peer, opt_.local_name, std::move(c.received));
  stream.startRequest(c.by);
  bool last = ++c.answered >= opt_.keep_alive_requests || stopping_;
  c.keep = answer_(stream, last) && !last;
  if (stream.late()) ++peers_->cut_off;
  c.received = stream.unread();
  c.outgoing = stream.unsent();
  c.taken_by = stream.sendBy();
  if (c.outgoing.empty()) return waitForNext(c);
  c.phase = Connection::Phase::kSending;  // the rest goes out from the gate, as the client takes it
  c.since = Clock::now();
  c.by = c.taken_by;
}

// After an answer: the connection waits for its next request from now.
void RequestGate::waitForNext(Connection& c) {
  c.since = Clock::now();
  c.phase = c.received.empty() ? Connection::Phase::kIdle : Connection::Phase::kRequest;
  c.by = c.since + (c.phase == Connection::Phase::kIdle ? opt_.keep_alive : kRequestDeadline);
  c.continued = false;
}

// Whether the connection's next request is whole within kLinger; c.keep is false once it closed.
bool RequestGate::nextArrives(Connection& c) {
  auto until = Clock::now() + kLinger;
  for (;;) {
    Arrival arrival = requestArrival(c.received);
    if (arrival != Arrival::kPartial) return arrival == Arrival::kWhole;
    size_t had = c.received.size();
    uint32_t want = EPOLLIN;
    Read read = readNow(c, &want);
    if (read == Read::kClosed) return c.keep = false;
    if (c.received.size() > had) continue;  // what came is judged first, without waiting for more
    if (Clock::now() >= until || !ConnectionStream::ready(c.fd, want == EPOLLOUT ? POLLOUT : POLLIN, 1)) return false;
  }
}

void RequestGate::comeBack(std::unique_ptr<Connection> c) {
  std::lock_guard lock(back_mu_);
  if (stopped_) {
    --answering_;
    return;  // c closes
  }
  back_.push_back(std::move(c));
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

// Connections answered: each waits here for its next request, or closes; or for its client to take the
// rest of its answer.
void RequestGate::takeBack() {
  uint64_t count;
  (void)!::read(wake_fd_, &count, sizeof count);
  std::vector<std::unique_ptr<Connection>> back;
  {
    std::lock_guard lock(back_mu_);
    back.swap(back_);
  }
  for (auto& c : back) {
    --answering_;
    cpu_->settle(c->peer, std::exchange(c->reserved_ns, 0), c->used_ns, Clock::now());
    std::string peer = c->peer;
    charged(peer, [&] { resume(std::move(c)); });
  }
  dropUnread();
}

// A connection back from a thread waits here for its next request, or closes; or for its client to take
// the rest of its answer.
void RequestGate::resume(std::unique_ptr<Connection> c) {
  bool sending = c->phase == Connection::Phase::kSending;
  if (!sending) c->since = Clock::now();
  if (c->phase == Connection::Phase::kIdle) c->by = c->since + opt_.keep_alive;
  Connection& ref = hold(std::move(c));
  if (ref.phase != Connection::Phase::kHandshake) countUnread(ref);
  if (sending) {
    send(ref);
  } else if (!ref.keep) {
    closeWhenTaken(ref);
  } else if (ref.phase == Connection::Phase::kHandshake) {
    watch(ref, ref.want | EPOLLET);
  } else {
    watch(ref, EPOLLIN);
    receive(ref);  // a request that came with the last one; TLS may hold its bytes already
  }
}

void RequestGate::close(int fd) { letGo(fd); }

// What a connection's client has not read yet of its answers: the rest waiting here, and its socket's.
void RequestGate::countUnread(Connection& c) {
  unread_.set(c.fd, c.peer, c.since.time_since_epoch().count(), c.outgoing.size() - c.sent + untaken(c.fd));
}

// Past max_unread, with the counts made afresh: the client holding the most loses its oldest answer (its
// connection is reset), until the rest fits.
void RequestGate::dropUnread() {
  if (unread_.held() <= unread_.budget()) return;
  for (int fd : unread_.holding()) countUnread(*waiting_.at(fd));
  while (std::optional<int> fd = unread_.over()) {
    ++dropped_;
    close(*fd);
  }
}

// After a connection's last answer went to the socket: it closes once its client has taken the answer (the
// sweep looks), so that the kernel is not left an answer to send after the close. One not taken by its
// deadline is reset (~Connection).
void RequestGate::closeWhenTaken(Connection& c) {
  if (c.phase == Connection::Phase::kHandshake || untaken(c.fd) == 0) return close(c.fd);
  if (c.ssl) {
    ERR_clear_error();
    SSL_shutdown(c.ssl);  // its close_notify follows the answer, if the socket takes it
    ERR_clear_error();
  }
  ::shutdown(c.fd, SHUT_WR);  // the client reads the answer to its end
  c.phase = Connection::Phase::kClosing;
  c.by = c.taken_by;
  unwatch(c);
}

// Closes the connections whose last answer was taken, and those whose deadline passed: a handshake or
// request that did not arrive whole in time, an answer not taken in time (counted, both), a kept-alive
// connection that sent nothing more (once it has taken its last answer, or that answer's time is up).
void RequestGate::sweep() {
  auto now = Clock::now();
  next_sweep_ = now + std::chrono::milliseconds(kSweepMs);
  for (int fd : unread_.holding()) countUnread(*waiting_.at(fd));  // what their clients read meanwhile
  dropUnread();
  std::vector<int> late;
  for (const auto& [fd, c] : waiting_) {
    if (c->phase == Connection::Phase::kClosing && untaken(fd) == 0) {  // its client took its last answer
      late.push_back(fd);
      continue;
    }
    if (now < c->by || c->held) continue;  // (one held back waits for its client's share, however long)
    bool idle = c->phase == Connection::Phase::kIdle;
    int left = idle ? untaken(fd) : 0;
    if (left > 0 && now < c->taken_by) continue;  // it still takes its last answer
    if (!idle || left > 0) ++peers_->cut_off;
    late.push_back(fd);
  }
  for (int fd : late) close(fd);
  cpu_->forget(now);
  // Their shares grow as others stop asking: those held back are looked at again, not only when the share
  // they had when held would have paid off.
  if (!held_.empty()) next_release_ = now;
}

}  // namespace gpool::allocator
