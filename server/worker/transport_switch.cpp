// The move to shared memory (transport_switch.h).
#include "transport_switch.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/shm_transport.h"

namespace gpool::worker {

proto::Status TransportSwitch::offer(uint32_t kind, const std::string& client_host, std::string& name, std::vector<uint8_t>& token) {
  if (kind != proto::kTransportShm) return proto::cu::kNotSupported;
  std::string here = proto::shmHostIdentity();
  if (here.empty() || client_host != here) return proto::cu::kNotSupported;
  return listener_.openLocal(name, token);
}

std::unique_ptr<proto::Transport> TransportSwitch::complete(const std::string& peer, int pool) {
  int link = listener_.acceptFd(kAcceptTimeoutMs, "shared-memory connection");
  if (link < 0) return nullptr;
  ucred cred{};
  socklen_t len = sizeof cred;
  int pid = ::getsockopt(link, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : 0;
  try {
    proto::ShmParts parts = proto::createShmParts(proto::kShmRingBytes);
    parts.pool = pool;
    bool sent = proto::sendShmParts(link, parts);
    parts.pool = -1;  // the pool's owner keeps it
    if (!sent) {
      parts.close();
      throw proto::TransportError("the client took no descriptors");
    }
    return proto::openShmTransport(parts, proto::kWorkerSide, link, "shm " + peer + " pid " + std::to_string(pid));
  } catch (const proto::TransportError& e) {
    spdlog::warn("client {} stays on TCP: {}", peer, e.what());
    return nullptr;
  }
}

}  // namespace gpool::worker
