// Exported physical memory and the socket that hands its descriptors to other workers (shareable_handles.h).
#include "shareable_handles.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

namespace gpool::worker {
namespace {

namespace cu = proto::cu;

// The registry's record of one export: the size its exporter knows and the socket that hands it out.
struct Record {
  ShareableHandles::Object kind = ShareableHandles::Object::kPhysical;
  uint64_t bytes = 0;
  char socket[sizeof(sockaddr_un::sun_path)] = {};
};

void setTimeouts(int fd) {
  timeval tv{ShareableHandles::kTimeoutMs / 1000, (ShareableHandles::kTimeoutMs % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool fill(sockaddr_un& addr, const std::string& path) {
  addr = sockaddr_un{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return true;
}

// Sends one status byte, with `fd` attached when it is valid.
bool sendAnswer(int conn, int fd) {
  uint8_t status = fd >= 0 ? 0 : 1;
  iovec iov{&status, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return sendmsg(conn, &msg, MSG_NOSIGNAL) == 1;
}

// Receives the status byte and the descriptor it carries: -1 unless exactly one descriptor came with "ok".
int receiveAnswer(int conn) {
  uint8_t status = 1;
  iovec iov{&status, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(conn, &msg, MSG_CMSG_CLOEXEC) != 1) return -1;
  int fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int got;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
      if (fd < 0 && n == 1) fd = got;
      else close(got);  // more than was asked for: none is trusted
    }
  }
  if ((status != 0 || (msg.msg_flags & MSG_CTRUNC)) && fd >= 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

}  // namespace

ShareableHandles::~ShareableHandles() {
  if (server_.joinable()) {
    uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof one);
    server_.join();
  }
  clear();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(path_.c_str());
  }
  if (stop_fd_ >= 0) close(stop_fd_);
}

bool ShareableHandles::listen() {
  if (listen_fd_ >= 0) return true;
  std::string dir = IpcRegistry::directory();
  mkdir(dir.c_str(), 0700);
  static std::atomic<unsigned> instances{0};  // several backends in one process (tests) each have their own
  std::string path = dir + "/fd-" + std::to_string(getpid()) + "-" + std::to_string(instances++) + ".sock";
  sockaddr_un addr;
  if (!fill(addr, path)) return false;
  unlink(path.c_str());  // a socket left by an earlier process of this pid
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 16) != 0) {
    spdlog::warn("shareable handles: cannot listen on {}: {}", path, std::strerror(errno));
    close(fd);
    return false;
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) {
    close(fd);
    unlink(path.c_str());
    return false;
  }
  listen_fd_ = fd;
  path_ = path;
  server_ = std::thread([this] { serve(); });
  return true;
}

// Requests are read side by side, so a peer that stalls delays no other: each has until its deadline to
// send a whole handle, and at most kMaxPending wait at once.
void ShareableHandles::serve() {
  struct Pending {
    int fd;
    std::vector<uint8_t> got;
    std::chrono::steady_clock::time_point deadline;
  };
  std::vector<Pending> pending;
  for (;;) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    for (const Pending& p : pending) fds.push_back({p.fd, POLLIN, 0});
    auto now = std::chrono::steady_clock::now();
    int wait = -1;  // until the first deadline (they come in order)
    if (!pending.empty())
      wait = std::max(0, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(pending.front().deadline - now).count()) + 1);
    if (poll(fds.data(), fds.size(), wait) < 0 && errno != EINTR) break;
    if (fds[1].revents) break;
    now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      bool done = now >= p.deadline;
      if (!done && fds[2 + i].revents) {
        uint8_t buf[IpcRegistry::kHandleBytes];
        ssize_t n = recv(p.fd, buf, IpcRegistry::kHandleBytes - p.got.size(), MSG_DONTWAIT);
        if (n > 0) p.got.insert(p.got.end(), buf, buf + n);
        done = n <= 0 || p.got.size() == IpcRegistry::kHandleBytes;
        if (p.got.size() == IpcRegistry::kHandleBytes) answer(p.fd, p.got);
      }
      if (done) {
        close(p.fd);
        p.fd = -1;
      }
    }
    std::erase_if(pending, [](const Pending& p) { return p.fd < 0; });
    if (fds[0].revents) {
      int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      ucred peer{};
      socklen_t len = sizeof peer;
      bool same_user = conn >= 0 && getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && peer.uid == getuid();
      if (same_user && pending.size() < kMaxPending)
        pending.push_back({conn, {}, now + std::chrono::milliseconds(kTimeoutMs)});
      else if (conn >= 0)
        close(conn);
    }
  }
  for (const Pending& p : pending) close(p.fd);
}

// A whole handle came: its descriptor if it is one filed here, else no.
void ShareableHandles::answer(int conn, const std::vector<uint8_t>& handle) {
  int fd = -1;
  {
    std::lock_guard lock(mu_);
    for (const auto& [object, e] : exports_)
      if (e.fd >= 0 && e.handle == handle) fd = dup(e.fd);
  }
  if (!sendAnswer(conn, fd)) spdlog::debug("shareable handles: a peer went away before its answer");
  if (fd >= 0) close(fd);
}

proto::Status ShareableHandles::publish(Object kind, uint64_t object, int fd, uint64_t bytes, uint64_t charge,
                                        std::vector<uint8_t>& handle) {
  std::lock_guard lock(mu_);
  if (auto it = exports_.find({kind, object}); it != exports_.end()) {
    close(fd);
    handle = it->second.handle;
    return cu::kSuccess;
  }
  if (!listen()) {
    close(fd);
    return cu::kNotSupported;
  }
  Record r;
  r.kind = kind;
  r.bytes = bytes;
  std::memcpy(r.socket, path_.c_str(), path_.size() + 1);
  std::vector<uint8_t> record(sizeof r);
  std::memcpy(record.data(), &r, sizeof r);
  if (proto::Status st = registry_.publish(IpcRegistry::Kind::kShareable, record, handle, charge); st != cu::kSuccess) {
    close(fd);
    return st;
  }
  exports_[{kind, object}] = Export{handle, fd};
  return cu::kSuccess;
}

proto::Status ShareableHandles::file(uint64_t ptr, const std::vector<uint8_t>& record, uint64_t charge,
                                     std::vector<uint8_t>& handle) {
  std::lock_guard lock(mu_);
  if (auto it = exports_.find({Object::kPoolAllocation, ptr}); it != exports_.end()) {
    handle = it->second.handle;
    return cu::kSuccess;
  }
  proto::Status st = registry_.publish(IpcRegistry::Kind::kPoolPointer, record, handle, charge);
  if (st == cu::kSuccess) exports_[{Object::kPoolAllocation, ptr}] = Export{handle, -1};
  return st;
}

proto::Status ShareableHandles::open(const std::vector<uint8_t>& handle, Object kind, int& fd, uint64_t& bytes,
                                     IpcRegistry::RecordFile* hold) const {
  std::vector<uint8_t> record;
  IpcRegistry::RecordFile held;
  proto::Status found = hold ? registry_.lookupHeld(IpcRegistry::Kind::kShareable, handle, record, held)
                             : registry_.lookup(IpcRegistry::Kind::kShareable, handle, record);
  if (found != cu::kSuccess) return found;
  Record r;
  if (record.size() != sizeof r) return cu::kInvalidValue;
  std::memcpy(&r, record.data(), sizeof r);
  if (r.kind != kind || std::memchr(r.socket, 0, sizeof r.socket) == nullptr) return cu::kInvalidValue;
  sockaddr_un addr;
  if (!fill(addr, r.socket)) return cu::kInvalidValue;
  int conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (conn < 0) return cu::kOutOfMemory;
  setTimeouts(conn);
  fd = -1;
  if (connect(conn, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      send(conn, handle.data(), handle.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(handle.size()))
    fd = receiveAnswer(conn);
  close(conn);
  bytes = r.bytes;
  if (fd < 0) return cu::kInvalidValue;  // the exporter released it, or went away
  if (hold) *hold = std::move(held);
  return cu::kSuccess;
}

IpcRegistry::RecordFile ShareableHandles::withdraw(Object kind, uint64_t object) {
  std::lock_guard lock(mu_);
  auto it = exports_.find({kind, object});
  if (it == exports_.end()) return {};
  IpcRegistry::RecordFile held = registry_.withdraw(it->second.handle);
  if (it->second.fd >= 0) close(it->second.fd);
  exports_.erase(it);
  return held;
}

std::vector<ShareableHandles::Held> ShareableHandles::clear() {
  std::lock_guard lock(mu_);
  std::vector<Held> held;
  for (auto& [object, e] : exports_) {
    if (auto file = registry_.withdraw(e.handle)) held.push_back(Held{object.first, object.second, std::move(file)});
    if (e.fd >= 0) close(e.fd);
  }
  exports_.clear();
  return held;
}

}  // namespace gpool::worker
