// The RDMA transport, for a client on another host than its worker where both have an RDMA device
// (issue 13): frames go as UCX tagged messages between two UCX workers, one per side. UCX drives
// InfiniBand and RoCE through rdma-core's libibverbs, and TCP or shared memory where there is no RDMA
// device, so the same code runs in CI and on a fabric. libucp is loaded at run time (dlopen): a host
// without UCX runs gpool over TCP. The TCP connection of the handshake stays open, unused but for telling
// that the peer has gone. docs/protocol.md, "RDMA"; docs/architecture.md says why UCX.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpool/protocol/transport.h"

namespace gpool::proto {

// Whether UCX can be used in this process (loaded once); false with `why` (no libucp, or it failed).
bool ucxAvailable(std::string& why);
// Whether this host has an RDMA device (InfiniBand or RoCE, as rdma-core lists them).
bool hostHasRdmaDevice();

// One side's UCX worker before it is connected: its address goes to the other side over TCP.
class UcxEndpoint {
 public:
  virtual ~UcxEndpoint() = default;
  virtual const std::vector<uint8_t>& address() const = 0;
};
// Throws TransportError when UCX is not available or refuses.
std::unique_ptr<UcxEndpoint> makeUcxEndpoint();
// The transport to the worker whose address is `remote` (refused: TransportError). `link` is the TCP
// transport it moves off; it must outlive this one.
std::unique_ptr<Transport> openUcxTransport(std::unique_ptr<UcxEndpoint> local, const std::vector<uint8_t>& remote,
                                            const Transport& link, std::string peer);

// Largest worker address accepted from a peer.
inline constexpr size_t kMaxUcxAddress = 64u << 10;

}  // namespace gpool::proto
