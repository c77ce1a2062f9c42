// The move from TCP to a faster transport (transport_choice.h; docs/protocol.md, "Shared memory").
#include "transport_choice.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/handshake.h"
#include "gpool/protocol/shm_transport.h"
#include "log.h"

namespace gpool::client {

TransportChoice transportChoice() {
  static TransportChoice choice = [] {
    const char* env = std::getenv("GPOOL_TRANSPORT");
    std::string v = env ? env : "";
    if (v.empty() || v == "auto") return TransportChoice::kAuto;
    if (v == "tcp") return TransportChoice::kTcp;
    if (v == "shm") return TransportChoice::kShm;
    if (v == "rdma") {
      GPOOL_LOG(Level::kWarn, "GPOOL_TRANSPORT=rdma: RDMA is not available in this gpool yet; using TCP");
      return TransportChoice::kRdma;
    }
    GPOOL_LOG(Level::kWarn, "GPOOL_TRANSPORT=%s is not one of auto, tcp, shm, rdma; using auto", v.c_str());
    return TransportChoice::kAuto;
  }();
  return choice;
}

namespace {

std::unique_ptr<proto::Transport> toSharedMemory(proto::Transport& tcp, const std::string& address, std::string& why, int& pool) {
  std::string host = proto::shmHostIdentity();
  std::vector<uint8_t> payload;
  proto::Writer(payload).putAll(proto::kTransportShm, host);
  proto::sendFrame(tcp, proto::kMsgSwitchTransport, proto::kWantsReply, 0, payload.data(), payload.size());
  std::vector<uint8_t> reply;
  proto::FrameHeader h = proto::recvFrame(tcp, reply, 4096);
  proto::Reader r(reply.data(), reply.size());
  proto::Status st = 0;
  std::string name;
  std::vector<uint8_t> token;
  if (h.msg != proto::kMsgSwitchTransport || !r.getAll(st, name, token) || !r.atEnd())
    throw proto::TransportError("malformed answer to the transport switch from " + address);
  if (st != 0) {
    why = st == proto::cu::kNotSupported ? "the worker is on another host" : "the worker refused (" + std::to_string(st) + ")";
    return nullptr;
  }
  int link = proto::connectAbstractSocket(name);
  if (link < 0) {
    why = std::string("cannot reach the worker's socket: ") + std::strerror(errno);
    return nullptr;
  }
  proto::ShmParts parts;
  if (::send(link, token.data(), token.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(token.size()) || !proto::recvShmParts(link, parts, 5000)) {
    ::close(link);
    why = "the worker sent no segment";
    return nullptr;
  }
  pool = std::exchange(parts.pool, -1);  // not the transport's
  try {
    return proto::openShmTransport(parts, proto::kClientSide, link, "shm " + address);
  } catch (const proto::TransportError& e) {
    why = e.what();
    if (pool >= 0) ::close(std::exchange(pool, -1));
    return nullptr;
  }
}

}  // namespace

std::unique_ptr<proto::Transport> moveFromTcp(proto::Transport& tcp, const std::string& address, uint32_t features, std::string& why,
                                              int& pool) {
  pool = -1;
  TransportChoice want = transportChoice();
  if (want == TransportChoice::kTcp || want == TransportChoice::kRdma) {
    why = "GPOOL_TRANSPORT";
    return nullptr;
  }
  std::unique_ptr<proto::Transport> moved;
  if (!(features & proto::kFeatureShm)) why = "the worker offers no shared memory (gpool before protocol 2.3)";
  else moved = toSharedMemory(tcp, address, why, pool);
  if (!moved && want == TransportChoice::kShm)
    throw proto::TransportError("GPOOL_TRANSPORT=shm, but the worker at " + address + " cannot be reached through shared memory: " + why);
  return moved;
}

}  // namespace gpool::client
