// A listening TCP socket on a free loopback port, for tests that connect real sockets.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <stdexcept>
#include <string>

namespace gpool::test {

// The listening descriptor (the caller closes it); `address` is "127.0.0.1:PORT".
inline int listenOnLoopback(std::string& address) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("cannot listen on loopback");
  address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  return listener;
}

}  // namespace gpool::test
