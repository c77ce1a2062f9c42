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
#include "token_listener.h"

namespace gpool::worker {

class TransportSwitch {
 public:
  // The client's request. kNotSupported: another host or namespace, a kind this worker does not offer, or
  // the host refused a socket; the client then stays on TCP.
  proto::Status offer(uint32_t kind, const std::string& client_host, std::string& name, std::vector<uint8_t>& token);
  // After the answer went out: the new transport once the client came (null: it did not, within the
  // timeout, and stays on TCP). `pool` (-1: none) goes with the transport's descriptors; it stays the
  // caller's (host_pool.h).
  std::unique_ptr<proto::Transport> complete(const std::string& peer, int pool);

  static constexpr int kAcceptTimeoutMs = 3000;

 private:
  TokenListener listener_;
};

}  // namespace gpool::worker
