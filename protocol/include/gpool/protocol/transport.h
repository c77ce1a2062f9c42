// The one narrow interface every transport implements (TCP, in-memory loopback; shared memory and RDMA
// later). Blocking, byte-stream semantics; framing lives above it (frame_io.h).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

namespace gpool::proto {

// Thrown when the peer is gone or the stream broke; the connection is unusable afterwards.
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The peer closed the connection (an orderly end, or a reset), rather than the stream breaking otherwise.
class TransportClosed : public TransportError {
 public:
  using TransportError::TransportError;
};
// The peer stopped mid-frame for longer than the stall timeout (setStallTimeout).
class TransportStalled : public TransportError {
 public:
  using TransportError::TransportError;
};

struct ConstBuffer {
  const void* data;
  size_t size;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Writes all buffers, in order, as one logical write.
  virtual void send(std::span<const ConstBuffer> buffers) = 0;
  // Reads exactly n bytes. `idle_ok`: the first byte may take as long as it takes (the wait between
  // frames); otherwise every wait is bounded by the stall timeout (a frame that stopped arriving).
  virtual void recv(void* data, size_t n, bool idle_ok = false) = 0;
  // Bounds each wait of a frame half-received or of a send the peer stopped reading, so a peer that
  // stops mid-frame costs its connection, not a process forever (0: no bound). Set once: no extra
  // system calls per frame. Also turns on keepalives, so a peer host that vanished is noticed.
  virtual void setStallTimeout(int /*ms*/) {}
  // Wakes a blocked recv/send in another thread; both then throw TransportError.
  virtual void shutdown() = 0;
  // Human-readable peer, for log lines ("tcp 10.0.0.5:7420").
  virtual std::string peer() const = 0;
  // A descriptor that turns readable or hangs up once the peer has gone, for a transport that moved off
  // this one and keeps it open only for that (ucx_transport.h); -1 when there is none.
  virtual int liveness() const { return -1; }
};

// Connects over TCP to "HOST:PORT" (throws TransportError with a message naming the address).
std::unique_ptr<Transport> connectTcp(const std::string& address, int timeout_ms = 5000);
// Wraps an already connected TCP socket (e.g. one gpool-server handed to a worker).
std::unique_ptr<Transport> adoptTcpSocket(int fd);
// Splits "HOST:PORT" (port optional: kDefaultPort; 0 means any free port when listening); false on
// malformed input.
bool parseHostPort(const std::string& address, std::string& host, uint16_t& port);

}  // namespace gpool::proto
