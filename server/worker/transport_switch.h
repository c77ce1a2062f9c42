// Moving a client from TCP to shared memory when it runs on this worker's host (issue 13; docs/protocol.md,
// "Shared memory"). The client asks right after the handshake, naming its host identity (boot id and network
// namespace). When that is this worker's, the worker listens on a Unix socket of a random abstract name and
// answers the name and a token; the client connects and presents the token; the worker makes the segment
// and eventfds and hands them over that socket, which from then on is the connection. The segment is only
// ever the worker's own: a worker never maps one a client made.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpool/protocol/status.h"
#include "gpool/protocol/transport.h"
#include "gpool/protocol/ucx_transport.h"
#include "token_listener.h"

namespace gpool::worker {

// A client on another host may instead ask for RDMA (kTransportRdma): it names its UCX worker's address,
// the worker answers with its own, and each side opens an endpoint to the other (ucx_transport.h); the
// TCP connection stays open and tells when the client has gone.
class TransportSwitch {
 public:
  // The client's request: `client` is its host identity (shm) or UCX address (rdma). kNotSupported:
  // another host or namespace, a kind this worker does not offer, or the host refused a socket or UCX; the
  // client then stays on TCP. For rdma, `name` is the worker's UCX address and `token` empty.
  proto::Status offer(uint32_t kind, const std::string& client, std::string& name, std::vector<uint8_t>& token);
  // After the answer went out: the new transport once the client came (null: it did not, within the
  // timeout, and stays on TCP). `pool` (-1: none) goes with shared memory's descriptors; it stays the
  // caller's (host_pool.h). `tcp` is the connection so far, which must outlive the new transport.
  std::unique_ptr<proto::Transport> complete(const proto::Transport& tcp, int pool);
  uint32_t kind() const { return kind_; }

  static constexpr int kAcceptTimeoutMs = 3000;

 private:
  std::unique_ptr<proto::Transport> completeShm(const std::string& peer, int pool);
  uint32_t kind_ = 0;
  TokenListener listener_;
  std::unique_ptr<proto::UcxEndpoint> ucx_;
  std::vector<uint8_t> client_ucx_;
};

}  // namespace gpool::worker
