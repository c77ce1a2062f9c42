// The local Unix socket of gpool-allocator: its connections identified by SO_PEERCRED, held by a request
// gate, and answered by httplib's request processing, so every route serves both listeners.
#include "local_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "connection_stream.h"
#include "elastic_pool.h"

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

void LocalSocketServer::listenLocal(const std::string& path, const RequestGate::Options& limits) {
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
  RequestGate::Options opt = limits;
  opt.max_connections = kMaxLocalConnections;
  opt.keep_alive = std::chrono::seconds(keep_alive_timeout_sec_);
  opt.keep_alive_requests = keep_alive_max_count_;
  opt.identify = [](int fd) {  // the uid the kernel names
    ucred cred{};
    socklen_t len = sizeof cred;
    return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? kPeerPrefix + std::to_string(cred.uid) : "";
  };
  opt.local_name = "unix";
  opt.share_name = "a local user's share of the " + std::to_string(kMaxLocalConnections) + " connections of the local socket";
  pool_ = std::make_unique<ElasticPool>(kMaxLocalConnections);
  gate_ = std::make_unique<RequestGate>(fd, peers_, *pool_, opt, [this](ConnectionStream& stream, bool last) {
    bool closed = false;
    return process_request(stream, last, closed, nullptr) && !closed;
  });
  thread_ = std::thread([this] {
    gate_->run();
    pool_->shutdown();
  });
}

void LocalSocketServer::stopLocal() {
  if (listen_fd_ < 0) return;
  gate_->stop();
  if (thread_.joinable()) thread_.join();
  gate_.reset();
  ::close(listen_fd_);
  listen_fd_ = -1;
  ::unlink(path_.c_str());
}

}  // namespace gpool::allocator
