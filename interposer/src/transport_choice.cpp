// The move from TCP to a faster transport (transport_choice.h; docs/protocol.md, "Shared memory").
#include "transport_choice.h"

#include <cstdlib>
#include <mutex>
#include <utility>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/handshake.h"
#include "gpool/protocol/shm_transport.h"
#include "gpool/protocol/ucx_transport.h"
#include "log.h"

namespace gpool::client {

TransportChoice transportChoice() {
  static TransportChoice choice = [] {
    const char* env = std::getenv("GPOOL_TRANSPORT");
    std::string v = env ? env : "";
    if (v.empty() || v == "auto") return TransportChoice::kAuto;
    if (v == "tcp") return TransportChoice::kTcp;
    if (v == "shm") return TransportChoice::kShm;
    if (v == "rdma") return TransportChoice::kRdma;
    GPOOL_LOG(Level::kWarn, "GPOOL_TRANSPORT=%s is not one of auto, tcp, shm, rdma; using auto", v.c_str());
    return TransportChoice::kAuto;
  }();
  return choice;
}

namespace {

// Sends the switch request and reads the worker's answer; false with `why` when it refused.
bool askToSwitch(proto::Transport& tcp, const std::string& address, uint32_t kind, const std::string& mine, std::string& name,
                 std::vector<uint8_t>& token, std::string& why) {
  std::vector<uint8_t> payload;
  proto::Writer(payload).putAll(kind, mine);
  proto::sendFrame(tcp, proto::kMsgSwitchTransport, proto::kWantsReply, 0, payload.data(), payload.size());
  std::vector<uint8_t> reply;
  proto::FrameHeader h = proto::recvFrame(tcp, reply, proto::kMaxUcxAddress + 4096);
  proto::Reader r(reply.data(), reply.size());
  proto::Status st = 0;
  if (h.msg != proto::kMsgSwitchTransport || !r.getAll(st, name, token) || !r.atEnd())
    throw proto::TransportError("malformed answer to the transport switch from " + address);
  if (st == 0) return true;
  why = st == proto::cu::kNotSupported ? "the worker is on another host or cannot offer it" : "the worker refused (" + std::to_string(st) + ")";
  return false;
}

// UCX (ucx_transport.h): the client's worker address out, the worker's back, an endpoint each way.
std::unique_ptr<proto::Transport> toRdma(proto::Transport& tcp, const std::string& address, std::string& why) {
  std::unique_ptr<proto::UcxEndpoint> ep;
  try {
    ep = proto::makeUcxEndpoint();
  } catch (const proto::TransportError& e) {
    why = e.what();
    return nullptr;
  }
  std::string name;
  std::vector<uint8_t> token;
  if (!askToSwitch(tcp, address, proto::kTransportRdma, std::string(ep->address().begin(), ep->address().end()), name, token, why))
    return nullptr;
  try {
    return proto::openUcxTransport(std::move(ep), std::vector<uint8_t>(name.begin(), name.end()), tcp, "ucx " + address);
  } catch (const proto::TransportError& e) {
    why = e.what();
    return nullptr;
  }
}

// Said once per process: why a connection that wanted RDMA stays on TCP.
void rdmaFallback(const std::string& address, const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] { GPOOL_LOG(Level::kWarn, "RDMA to the worker at %s cannot be used (%s); using TCP", address.c_str(), why.c_str()); });
}

std::unique_ptr<proto::Transport> toSharedMemory(proto::Transport& tcp, const std::string& address, std::string& why, int& pool) {
  std::string name;
  std::vector<uint8_t> token;
  if (!askToSwitch(tcp, address, proto::kTransportShm, proto::shmHostIdentity(), name, token, why)) return nullptr;
  try {
    return proto::joinShm(proto::knockShm(name, token), 5000, pool, "shm " + address);
  } catch (const proto::TransportError& e) {
    why = e.what();
    return nullptr;
  }
}

std::unique_ptr<proto::Transport> rdmaOrTcp(proto::Transport& tcp, const std::string& address, uint32_t features, std::string& why) {
  std::unique_ptr<proto::Transport> moved;
  if (!(features & proto::kFeatureRdma)) why = "the worker cannot load UCX";
  else if (proto::ucxAvailable(why)) moved = toRdma(tcp, address, why);
  if (!moved) rdmaFallback(address, why);
  return moved;
}

}  // namespace

Move moveFromTcp(proto::Transport& tcp, const std::string& address, uint32_t features) {
  Move m;
  TransportChoice want = transportChoice();
  if (want == TransportChoice::kTcp) {
    m.why = "GPOOL_TRANSPORT";
    return m;
  }
  if (want != TransportChoice::kRdma) {
    if (!(features & proto::kFeatureShm)) m.why = "the worker offers no shared memory (gpool before protocol 2.3)";
    else m.transport = toSharedMemory(tcp, address, m.why, m.pool);
    if (m.transport) {
      m.kind = "shared memory";
      m.shared_memory = true;
      return m;
    }
    if (want == TransportChoice::kShm)
      throw proto::TransportError("GPOOL_TRANSPORT=shm, but the worker at " + address + " cannot be reached through shared memory: " + m.why);
    // Another host: RDMA where both ends have a device (and this process has UCX).
    std::string ucx;
    if (!(features & proto::kFeatureRdmaDevice) || !proto::hostHasRdmaDevice() || !proto::ucxAvailable(ucx)) return m;
  }
  m.transport = rdmaOrTcp(tcp, address, features, m.why);
  if (m.transport) m.kind = "RDMA (UCX)";
  return m;
}

}  // namespace gpool::client
