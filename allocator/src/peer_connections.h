// How many connections one peer (a TCP client's address, a local user's uid) holds of a gpool-allocator
// listener at once: at most its share, so that a host with a crowd of slow connections or long polls holds
// only its own threads, not everyone's. Counted by the listeners (tcp_listener.h, local_socket.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace gpool::allocator {

class PeerConnections {
 public:
  // `what` names the setting that sets `per_peer`, for the warning a refusal logs.
  PeerConnections(size_t per_peer, std::string what) : per_peer_(per_peer), what_(std::move(what)) {}
  // Counts one more connection from `peer`; false (nothing counted) when it holds `per_peer` already.
  bool admit(const std::string& peer);
  void release(const std::string& peer);

  std::atomic<uint64_t> refused{0};  // connections closed unserved: their peer held its share
  std::atomic<uint64_t> cut_off{0};  // handshakes and requests that did not arrive whole in time

 private:
  std::mutex mu_;
  std::map<std::string, size_t> held_;
  size_t per_peer_;
  std::string what_;
  std::chrono::steady_clock::time_point last_warned_{};
};

}  // namespace gpool::allocator
