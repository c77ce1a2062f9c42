// How many connections one peer (a client's address, a local user's uid) holds of a listener at once:
// at most its share, so that a host with a crowd of slow connections holds its own share of what a
// daemon serves, not everyone's. gpool-allocator counts its connections (tcp_listener.h, local_socket.h),
// gpool-server its connections that have not finished their handshake (listener.cpp).
#pragma once

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

namespace gpool {

class PeerConnections {
 public:
  explicit PeerConnections(size_t per_peer) : per_peer_(per_peer) {}

  // Who a numeric client address counts as: an IPv4 address itself (also when IPv4-mapped,
  // ::ffff:a.b.c.d); an IPv6 address by its /64 network, which one host or site holds whole (one address
  // each would let it open a share per address); anything else as given.
  static std::string peerOf(const std::string& address) {
    in6_addr a{};
    if (::inet_pton(AF_INET6, address.c_str(), &a) != 1) return address;
    char text[INET6_ADDRSTRLEN] = {};
    if (IN6_IS_ADDR_V4MAPPED(&a)) return ::inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof text) ? text : address;
    std::fill(std::begin(a.s6_addr) + 8, std::end(a.s6_addr), 0);
    return ::inet_ntop(AF_INET6, &a, text, sizeof text) ? std::string(text) + "/64" : address;
  }
  // Counts one more connection from `peer`; false (nothing counted, one more refused) when it holds its
  // share already.
  bool admit(const std::string& peer) {
    std::lock_guard lock(mu_);
    size_t& held = held_[peer];
    if (held < per_peer_) return ++held, true;
    ++refused;
    return false;
  }
  void release(const std::string& peer) {
    std::lock_guard lock(mu_);
    auto it = held_.find(peer);
    if (it != held_.end() && --it->second == 0) held_.erase(it);
  }
  size_t perPeer() const { return per_peer_; }
  // Whether to log a refusal now: at most once every 10 s (a crowd would otherwise fill the log).
  bool warnNow() {
    std::lock_guard lock(mu_);
    auto now = std::chrono::steady_clock::now();
    if (now - last_warned_ < std::chrono::seconds(10)) return false;
    last_warned_ = now;
    return true;
  }

  std::atomic<uint64_t> refused{0};  // connections closed unserved: their peer held its share
  std::atomic<uint64_t> cut_off{0};  // handshakes and requests that did not arrive whole in time

 private:
  std::mutex mu_;
  std::map<std::string, size_t> held_;
  size_t per_peer_;
  std::chrono::steady_clock::time_point last_warned_{};
};

}  // namespace gpool
