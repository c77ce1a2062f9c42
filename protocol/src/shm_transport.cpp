// The shared-memory transport (shm_transport.h).
#include "gpool/protocol/shm_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "gpool/protocol/host_identity.h"
#include "wait_polling.h"

namespace gpool::proto {

void ShmParts::close() {
  for (int* fd : {&segment, &wake[0], &wake[1], &pool}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

namespace {

constexpr uint64_t kMagic = 0x5250584d48535047;  // "GPSHMXPR"

struct alignas(64) Word {
  std::atomic<uint64_t> v{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the rings' counters are shared between processes");

// The segment's layout: the header, then ring 0 (written by the worker), then ring 1 (by the client).
struct Header {
  uint64_t magic;
  uint64_t ring_bytes;
  Word sleeping[2];  // threads of side s asleep on its eventfd: the other side writes it when not 0
  Word head[2];      // ring r: bytes its reader consumed
  Word tail[2];      // ring r: bytes its writer published
};
constexpr size_t kDataAt = (sizeof(Header) + 4095) & ~size_t{4095};

size_t segmentBytes(size_t ring_bytes) { return kDataAt + 2 * ring_bytes; }

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class ShmTransport final : public Transport {
 public:
  ShmTransport(ShmParts parts, int side, int link, void* base, size_t ring_bytes, std::string peer)
      : parts_(parts), side_(side), link_(link), base_(base), ring_bytes_(ring_bytes), peer_(std::move(peer)) {
    h_ = static_cast<Header*>(base);
    out_ = static_cast<uint8_t*>(base) + kDataAt + static_cast<size_t>(side) * ring_bytes;
    in_ = static_cast<uint8_t*>(base) + kDataAt + static_cast<size_t>(1 - side) * ring_bytes;
  }
  ~ShmTransport() override {
    ::munmap(base_, segmentBytes(ring_bytes_));
    parts_.close();
    ::close(link_);
  }

  void send(std::span<const ConstBuffer> buffers) override {
    Word& head = h_->head[side_];
    Word& tail = h_->tail[side_];
    uint64_t t = tail.v.load(std::memory_order_relaxed);
    for (const ConstBuffer& b : buffers) {
      const auto* p = static_cast<const uint8_t*>(b.data);
      for (size_t done = 0; done < b.size;) {
        uint64_t room = 0;
        // The counters are in memory the peer writes too: whatever they say, no copy leaves the ring.
        wait([&] { return (room = std::min<uint64_t>(ring_bytes_ - (t - head.v.load(std::memory_order_acquire)), ring_bytes_)) > 0; },
             false, "stopped reading");
        size_t n = std::min<size_t>({static_cast<size_t>(room), b.size - done, kPublishEvery});
        copyIn(t, p + done, n);
        t += n;
        done += n;
        tail.v.store(t, std::memory_order_seq_cst);  // publish, then see whether the reader sleeps
        wakePeer();
      }
    }
  }

  void recv(void* data, size_t n, bool idle_ok) override {
    Word& head = h_->head[1 - side_];
    Word& tail = h_->tail[1 - side_];
    auto* p = static_cast<uint8_t*>(data);
    uint64_t hd = head.v.load(std::memory_order_relaxed);
    for (size_t got = 0; got < n;) {
      uint64_t ready = 0;
      wait([&] { return (ready = std::min<uint64_t>(tail.v.load(std::memory_order_acquire) - hd, ring_bytes_)) > 0; }, idle_ok && got == 0,
           got ? "stopped sending mid-frame" : "sent nothing");
      size_t k = std::min<size_t>(ready, n - got);
      copyOut(hd, p + got, k);
      hd += k;
      got += k;
      head.v.store(hd, std::memory_order_seq_cst);  // room for the writer, then see whether it sleeps
      wakePeer();
    }
  }

  void setStallTimeout(int ms) override { stall_ms_ = ms; }

  void shutdown() override {
    closed_.store(true);
    ::shutdown(link_, SHUT_RDWR);  // the peer sees the connection end; a sleeper here wakes (POLLHUP)
    uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(parts_.wake[side_], &one, sizeof one);
  }

  std::string peer() const override { return peer_; }

 private:
  static constexpr size_t kPublishEvery = 256u << 10;  // the reader starts on a large write's first part
  static constexpr int kSafetyMs = 1000;

  // Waits until `ready()`, spinning first, then sleeping on this side's eventfd and the link. Throws when
  // the connection ended, or nothing moved for the stall timeout (unless `idle_ok`).
  template <typename Ready>
  void wait(Ready ready, bool idle_ok, const char* stall_what) {
    if (ready()) return;
    auto start = std::chrono::steady_clock::now();
    const auto began = start;
    // Spin a while first, yielding the core (wait_polling.h: how long, and when not at all).
    for (const auto budget = polling_.budget(); std::chrono::steady_clock::now() - start < budget;) {
      for (int i = 0; i < 16; ++i) cpuRelax();
      if (ready()) return polling_.waited(std::chrono::steady_clock::now() - began);
      std::this_thread::yield();
    }
    struct Measured {  // however the wait ends (ready, or a throw), the next one's spin learns from it
      WaitPolling& p;
      std::chrono::steady_clock::time_point began;
      ~Measured() { p.waited(std::chrono::steady_clock::now() - began); }
    } measured{polling_, began};
    Word& sleeping = h_->sleeping[side_];
    // A peer too busy to read that still writes to us (a worker's Alive frames) is alive: what it wrote
    // restarts the stall timeout of a send, as on TCP.
    uint64_t heard = h_->tail[1 - side_].v.load(std::memory_order_acquire);
    // A count, not a flag: a thread sending and one receiving on this side may both sleep, and one that
    // wakes must not clear what the other still waits for.
    sleeping.v.fetch_add(1, std::memory_order_seq_cst);  // then look again: a writer after this sees it
    struct Awake {
      Word& w;
      ~Awake() { w.v.fetch_sub(1, std::memory_order_seq_cst); }
    } awake{sleeping};
    for (;;) {
      if (closed_.load()) throw TransportError("connection to " + peer_ + " was shut down");
      std::atomic_thread_fence(std::memory_order_seq_cst);  // (the count's store before the counters' loads)
      if (ready()) break;
      int timeout = stall_ms_ > 0 && !idle_ok ? stall_ms_ - static_cast<int>(elapsedMs(start)) : -1;
      if (stall_ms_ > 0 && !idle_ok && timeout <= 0) {
        if (uint64_t now = h_->tail[1 - side_].v.load(std::memory_order_acquire); now != heard) {
          heard = now;
          start = std::chrono::steady_clock::now();
          continue;
        }
        throw TransportStalled(peer_ + " " + stall_what + " for " + std::to_string(stall_ms_) + " ms (the stall timeout)");
      }
      pollfd p[2] = {{parts_.wake[side_], POLLIN, 0}, {link_, POLLIN, 0}};
      // Bounded even when idle: a wake-up lost to a peer that wrote nonsense costs a second, not the process.
      int r = ::poll(p, 2, timeout < 0 || timeout > kSafetyMs ? kSafetyMs : timeout);
      if (r < 0 && errno != EINTR) throw TransportError("waiting on " + peer_ + " failed: " + std::strerror(errno));
      if (p[0].revents & POLLIN) {
        uint64_t count = 0;
        [[maybe_unused]] ssize_t rd = ::read(parts_.wake[side_], &count, sizeof count);
      }
      if (ready()) break;
      if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) throw TransportError("connection closed by " + peer_);
    }
  }

  void wakePeer() {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the counter's store before the flag's load
    if (h_->sleeping[1 - side_].v.load(std::memory_order_seq_cst) == 0) return;
    uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(parts_.wake[1 - side_], &one, sizeof one);
  }

  void copyIn(uint64_t at, const uint8_t* src, size_t n) {
    size_t off = at & (ring_bytes_ - 1), first = std::min(n, ring_bytes_ - off);
    std::memcpy(out_ + off, src, first);
    std::memcpy(out_, src + first, n - first);
  }
  void copyOut(uint64_t at, uint8_t* dst, size_t n) {
    size_t off = at & (ring_bytes_ - 1), first = std::min(n, ring_bytes_ - off);
    std::memcpy(dst, in_ + off, first);
    std::memcpy(dst + first, in_, n - first);
  }
  static int64_t elapsedMs(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since).count();
  }

  ShmParts parts_;
  WaitPolling polling_;  // how long a wait spins before it sleeps
  int side_, link_;
  void* base_;
  size_t ring_bytes_;
  std::string peer_;
  Header* h_;
  uint8_t *out_, *in_;
  int stall_ms_ = 0;
  std::atomic<bool> closed_{false};
};

}  // namespace

ShmParts createShmParts(size_t ring_bytes) {
  if (ring_bytes < (64u << 10) || (ring_bytes & (ring_bytes - 1))) throw TransportError("shared-memory ring size must be a power of two of 64 KiB or more");
  ShmParts parts;
  parts.segment = ::memfd_create("gpool-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  parts.wake = {::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  size_t bytes = segmentBytes(ring_bytes);
  void* base = MAP_FAILED;
  if (parts.segment >= 0 && parts.wake[0] >= 0 && parts.wake[1] >= 0 && ::ftruncate(parts.segment, static_cast<off_t>(bytes)) == 0 &&
      ::fcntl(parts.segment, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, parts.segment, 0);
  if (base == MAP_FAILED) {
    std::string why = std::strerror(errno);
    parts.close();
    throw TransportError("cannot make a shared-memory segment: " + why);
  }
  auto* h = new (base) Header{};
  h->magic = kMagic;
  h->ring_bytes = ring_bytes;
  ::munmap(base, bytes);
  return parts;
}

std::unique_ptr<Transport> openShmTransport(ShmParts parts, int side, int link, std::string peer) {
  auto fail = [&](const std::string& why) -> std::unique_ptr<Transport> {
    parts.close();
    ::close(link);
    throw TransportError("shared-memory transport to " + peer + ": " + why);
  };
  struct stat st {};
  if (side != kWorkerSide && side != kClientSide) return fail("no such side");
  if (::fstat(parts.segment, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < static_cast<off_t>(sizeof(Header)))
    return fail("the segment is not one");
  // A memfd sealed against resizing: the other side cannot shrink it under this one's mapping.
  int seals = ::fcntl(parts.segment, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) return fail("the segment is not sealed");
  Header head{};
  if (::pread(parts.segment, &head, sizeof head, 0) != static_cast<ssize_t>(sizeof head)) return fail("the segment cannot be read");
  size_t ring = head.ring_bytes;
  if (head.magic != kMagic || ring < (64u << 10) || (ring & (ring - 1)) || ring > (1ull << 32) ||
      static_cast<uint64_t>(st.st_size) != segmentBytes(ring))
    return fail("the segment is not gpool's");
  void* base = ::mmap(nullptr, segmentBytes(ring), PROT_READ | PROT_WRITE, MAP_SHARED, parts.segment, 0);
  if (base == MAP_FAILED) return fail(std::string("cannot map the segment: ") + std::strerror(errno));
  return std::make_unique<ShmTransport>(parts, side, link, base, ring, std::move(peer));
}

std::string shmHostIdentity() {
  std::string boot = kernelBootId();
  char ns[128] = {};
  ssize_t n = ::readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  return boot.empty() ? "" : boot + " " + (n > 0 ? std::string(ns, static_cast<size_t>(n)) : "net:?");
}

bool abstractSocketAddress(const std::string& name, sockaddr_un& addr, socklen_t& len) {
  addr = sockaddr_un{};
  addr.sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: the abstract namespace
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return true;
}

int connectAbstractSocket(const std::string& name) {
  sockaddr_un addr;
  socklen_t len = 0;
  if (!abstractSocketAddress(name, addr, len)) {
    errno = EINVAL;
    return -1;
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

bool sendShmParts(int socket, const ShmParts& parts) {
  int fds[4] = {parts.segment, parts.wake[0], parts.wake[1], parts.pool};
  size_t n = parts.pool >= 0 ? 4 : 3;
  char byte = 'S';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = CMSG_SPACE(n * sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(n * sizeof(int));
  std::memcpy(CMSG_DATA(c), fds, n * sizeof(int));
  return ::sendmsg(socket, &m, MSG_NOSIGNAL) == 1;
}

bool recvShmParts(int socket, ShmParts& parts, int timeout_ms) {
  pollfd p{socket, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return false;
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  if (::recvmsg(socket, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT) != 1) return false;
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) return false;
  int fds[4] = {-1, -1, -1, -1};
  size_t n = std::min<size_t>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int), 4);
  std::memcpy(fds, CMSG_DATA(c), n * sizeof(int));
  if (n < 3 || (m.msg_flags & MSG_CTRUNC) || byte != 'S') {
    for (size_t i = 0; i < n; ++i) ::close(fds[i]);
    return false;
  }
  parts.segment = fds[0];
  parts.wake = {fds[1], fds[2]};
  parts.pool = fds[3];
  return true;
}

std::unique_ptr<Transport> offerShm(int link, size_t ring_bytes, int pool, std::string peer) {
  ShmParts parts;
  try {
    parts = createShmParts(ring_bytes);
  } catch (const TransportError&) {
    ::close(link);
    throw;
  }
  parts.pool = pool;
  bool sent = sendShmParts(link, parts);
  parts.pool = -1;  // the pool's owner keeps it
  if (!sent) {
    parts.close();
    ::close(link);
    throw TransportError("the client took no descriptors");
  }
  return openShmTransport(parts, kWorkerSide, link, std::move(peer));
}

int knockShm(const std::string& name, const std::vector<uint8_t>& token) {
  int link = connectAbstractSocket(name);
  if (link < 0) throw TransportError(std::string("cannot reach the worker's socket: ") + std::strerror(errno));
  if (::send(link, token.data(), token.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(token.size())) {
    std::string why = std::strerror(errno);
    ::close(link);
    throw TransportError("cannot present the token to the worker: " + why);
  }
  return link;
}

std::unique_ptr<Transport> joinShm(int link, int timeout_ms, int& pool, std::string peer) {
  pool = -1;
  ShmParts parts;
  if (!recvShmParts(link, parts, timeout_ms)) {
    ::close(link);
    throw TransportError("the worker sent no segment");
  }
  int got = std::exchange(parts.pool, -1);  // not the transport's
  try {
    std::unique_ptr<Transport> t = openShmTransport(parts, kClientSide, link, std::move(peer));
    pool = got;
    return t;
  } catch (const TransportError&) {
    if (got >= 0) ::close(got);
    throw;
  }
}

}  // namespace gpool::proto
