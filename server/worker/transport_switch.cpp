// The move to shared memory (transport_switch.h).
#include "transport_switch.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/shm_transport.h"

namespace gpool::worker {

proto::Status TransportSwitch::offer(uint32_t kind, const std::string& client, std::string& name, std::vector<uint8_t>& token) {
  kind_ = kind;
  if (kind == proto::kTransportRdma) {
    if (client.empty() || client.size() > proto::kMaxUcxAddress) return proto::cu::kInvalidValue;
    try {
      ucx_ = proto::makeUcxEndpoint();
    } catch (const proto::TransportError& e) {
      spdlog::warn("a client asked for RDMA, which this worker cannot offer: {}", e.what());
      return proto::cu::kNotSupported;
    }
    client_ucx_.assign(client.begin(), client.end());
    name.assign(ucx_->address().begin(), ucx_->address().end());
    return proto::cu::kSuccess;
  }
  if (kind != proto::kTransportShm) return proto::cu::kNotSupported;
  std::string here = proto::shmHostIdentity();
  if (here.empty() || client != here) return proto::cu::kNotSupported;
  return listener_.openLocal(name, token);
}

std::unique_ptr<proto::Transport> TransportSwitch::complete(const proto::Transport& tcp, int pool) {
  if (kind_ != proto::kTransportRdma) return completeShm(tcp.peer(), pool);
  try {
    return proto::openUcxTransport(std::move(ucx_), client_ucx_, tcp, "ucx " + tcp.peer());
  } catch (const proto::TransportError& e) {
    spdlog::warn("client {} stays on TCP: {}", tcp.peer(), e.what());
    return nullptr;
  }
}

std::unique_ptr<proto::Transport> TransportSwitch::completeShm(const std::string& peer, int pool) {
  int link = listener_.acceptFd(kAcceptTimeoutMs, "shared-memory connection");
  if (link < 0) return nullptr;
  ucred cred{};
  socklen_t len = sizeof cred;
  int pid = ::getsockopt(link, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : 0;
  try {
    return proto::offerShm(link, proto::kShmRingBytes, pool, "shm " + peer + " pid " + std::to_string(pid));
  } catch (const proto::TransportError& e) {
    spdlog::warn("client {} stays on TCP: {}", peer, e.what());
    return nullptr;
  }
}

}  // namespace gpool::worker
