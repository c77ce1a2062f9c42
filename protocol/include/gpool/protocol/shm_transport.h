// The shared-memory transport, for a client on its worker's host (issue 13). One segment (a memfd, never
// a name in a file system) holds two byte rings, one per direction; a side that must wait (nothing to
// read, no room to write) spins briefly, then sleeps on its eventfd, which the other side writes only when
// it sees the sleeper's flag set. A connected Unix socket between the two is the connection itself: its end
// means the peer has gone (as TCP's does), and it carries the segment and eventfds from the worker, which
// makes them all, to the client (SCM_RIGHTS). docs/protocol.md, "Shared memory".
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "gpool/protocol/transport.h"

namespace gpool::proto {

// The descriptors of one shared-memory connection: the segment and each side's eventfd, and the worker's
// pool of shared page-locked host memory when it has one (server/worker/host_pool.h; not the transport's).
struct ShmParts {
  int segment = -1;
  std::array<int, 2> wake{-1, -1};  // [kWorkerSide], [kClientSide]
  int pool = -1;
  void close();
};
inline constexpr int kWorkerSide = 0, kClientSide = 1;

// Makes a segment with two rings of `ring_bytes` (a power of two, at least 64 KiB) and the two eventfds;
// throws TransportError when the host refuses.
ShmParts createShmParts(size_t ring_bytes);
// A transport for `side` over `parts`, with `link` the Unix socket to the other side. Takes ownership of
// every descriptor (also when it throws: a segment that is not gpool's, or of the wrong size).
std::unique_ptr<Transport> openShmTransport(ShmParts parts, int side, int link, std::string peer);

// Passing the parts over a Unix socket: false when the socket failed, or (receiving) within `timeout_ms`
// nothing came, or what came is not three descriptors (four with a pool).
bool sendShmParts(int socket, const ShmParts& parts);
bool recvShmParts(int socket, ShmParts& parts, int timeout_ms);

inline constexpr size_t kShmRingBytes = 8u << 20;
// The host-function channel's rings (host functions are due one at a time; a captured copy's rows stream
// through the ring however many they are).
inline constexpr size_t kShmChannelRingBytes = 1u << 20;

// The two ends of a shared-memory connection, after the worker answered a socket name and a token on an
// authenticated connection (the transport switch; the host-function channel).
// Worker: `link` is the Unix socket it accepted (with the token checked); makes the segment with rings of
// `ring_bytes` and the eventfds and hands them over with `pool` (-1: none; it stays the caller's).
// Client: `knockShm` connects to the worker's socket `name` and presents `token` (the socket, or throws);
// `joinShm` waits up to `timeout_ms` (-1: until the worker answers or goes) for what the worker sends on
// it; `pool` is then the worker's pool segment (-1: none came), the caller's to close.
// offerShm and joinShm take their socket; each throws TransportError saying why it could not.
std::unique_ptr<Transport> offerShm(int link, size_t ring_bytes, int pool, std::string peer);
int knockShm(const std::string& name, const std::vector<uint8_t>& token);
std::unique_ptr<Transport> joinShm(int link, int timeout_ms, int& pool, std::string peer);

// Which processes can share memory and reach each other's abstract Unix sockets: the kernel's boot id and
// the process's network namespace, as text. Equal identities: one host, one namespace.
std::string shmHostIdentity();

// A Unix socket address named `name` in the abstract namespace (no file; reachable within one network
// namespace), and its length; false when the name is empty or does not fit.
bool abstractSocketAddress(const std::string& name, sockaddr_un& addr, socklen_t& len);
// A Unix socket connected to `name` there: its descriptor, or -1 with errno set.
int connectAbstractSocket(const std::string& name);

}  // namespace gpool::proto
