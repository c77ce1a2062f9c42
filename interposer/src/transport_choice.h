// Which transport a connection to a worker uses after the TCP handshake (issue 13): shared memory when the
// worker runs on this host (detected: same boot id and network namespace), RDMA over UCX when it is on
// another host and both have an RDMA device, TCP otherwise. GPOOL_TRANSPORT=auto|tcp|shm|rdma overrides:
// tcp never moves; shm must move or the connection fails, saying why; rdma moves to UCX whatever devices
// there are (UCX then uses TCP or shared memory), or says once why it cannot and stays on TCP.
#pragma once

#include <memory>
#include <string>

#include "gpool/protocol/transport.h"

namespace gpool::client {

enum class TransportChoice { kAuto, kTcp, kShm, kRdma };

// GPOOL_TRANSPORT, parsed once (an unknown value: kAuto, said once).
TransportChoice transportChoice();

// Where a connection went after the handshake: a new transport, or none (it stays on TCP, and `why` says
// why); `pool` is the worker's pool segment for page-locked memory (host_pool.h; -1: none).
struct Move {
  std::unique_ptr<proto::Transport> transport;
  const char* kind = "TCP";
  bool shared_memory = false;  // the new transport is shared memory: the worker is on this host
  int pool = -1;
  std::string why;
};

// Asks the worker behind `tcp` (just after the handshake; `features` from its Hello) to move to shared
// memory, or to RDMA when it is on another host and both have an RDMA device. Throws
// proto::TransportError when the choice demands a transport this connection cannot have (shm).
Move moveFromTcp(proto::Transport& tcp, const std::string& address, uint32_t features);

}  // namespace gpool::client
