// Which transport a connection to a worker uses after the TCP handshake (issue 13): shared memory when the
// worker runs on this host (detected: same boot id and network namespace), TCP otherwise.
// GPOOL_TRANSPORT=auto|tcp|shm|rdma overrides: tcp never moves; shm must move or the connection fails,
// saying why; rdma is not available yet (said once; TCP then).
#pragma once

#include <memory>
#include <string>

#include "gpool/protocol/transport.h"

namespace gpool::client {

enum class TransportChoice { kAuto, kTcp, kShm, kRdma };

// GPOOL_TRANSPORT, parsed once (an unknown value: kAuto, said once).
TransportChoice transportChoice();

// Asks the worker behind `tcp` (just after the handshake; `features` from its Hello) to move to shared
// memory. Returns the new transport, with `pool` the worker's pool segment for page-locked memory
// (host_pool.h; -1: none), or null with `why` set (the connection stays on TCP). Throws
// proto::TransportError when the choice demands a transport this connection cannot have.
std::unique_ptr<proto::Transport> moveFromTcp(proto::Transport& tcp, const std::string& address, uint32_t features, std::string& why,
                                              int& pool);

}  // namespace gpool::client
