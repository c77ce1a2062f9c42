// The local Unix socket of gpool-allocator: accepted here, identified by SO_PEERCRED, then handed to
// httplib's request processing, so every route serves both listeners.
#include "local_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "connection_stream.h"

namespace gpool::allocator {
namespace {

constexpr const char* kPeerPrefix = "unix:uid=";  // a TCP peer's address (an IP) never starts so

}  // namespace

LocalSocketServer::~LocalSocketServer() { stopLocal(); }

std::optional<uid_t> LocalSocketServer::peerUid(const httplib::Request& req) {
  const std::string prefix = kPeerPrefix;
  if (req.remote_addr.rfind(prefix, 0) != 0) return std::nullopt;
  try {
    return static_cast<uid_t>(std::stoul(req.remote_addr.substr(prefix.size())));
  } catch (...) {
    return std::nullopt;
  }
}

void LocalSocketServer::listenLocal(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    throw std::runtime_error("--socket path must be 1 to " + std::to_string(sizeof addr.sun_path - 1) + " characters");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("cannot make a Unix socket: ") + std::strerror(errno));
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());  // one a previous run left
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::chmod(path.c_str(), 0666) != 0 || ::listen(fd, 128) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot listen on the Unix socket " + path + ": " + why);
  }
  listen_fd_ = fd;
  path_ = path;
  accept_thread_ = std::thread([this] { acceptLoop(); });
}

// A connection is refused here, before it costs a thread, when its user holds its share already or
// every connection is taken; the client sees it close and tries again.
void LocalSocketServer::acceptLoop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    std::string peer = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? kPeerPrefix + std::to_string(cred.uid) : "";
    if (peer.empty() || !peers_.admit(peer)) {
      if (!peer.empty() && peers_.warnNow())
        spdlog::warn("closed a local connection of uid {}: it holds {} already (a local user's share of the {} "
                     "connections of the local socket); {} closed so far", cred.uid, kMaxPerUser, kMaxLocalConnections,
                     peers_.refused.load());
      ::close(fd);
      continue;
    }
    std::lock_guard lock(mu_);
    if (active_ >= kMaxLocalConnections) {
      peers_.release(peer);
      ::close(fd);
      continue;
    }
    ++active_;
    std::thread([this, fd, peer] { serve(fd, peer); }).detach();
  }
}

void LocalSocketServer::serve(int fd, const std::string& peer) {
  ConnectionStream stream(fd, nullptr, peer, "unix");
  bool closed = false;
  process_request(stream, true, closed, nullptr);
  if (stream.late()) ++peers_.cut_off;
  peers_.release(peer);
  ::close(fd);
  std::lock_guard lock(mu_);
  --active_;
  idle_.notify_all();
}

void LocalSocketServer::stopLocal() {
  if (listen_fd_ < 0 || stopping_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  ::close(listen_fd_);
  ::unlink(path_.c_str());
  std::unique_lock lock(mu_);
  idle_.wait(lock, [this] { return active_ == 0; });
}

}  // namespace gpool::allocator
