// A one-shot listening socket that hands over the first connection to present a random token: the
// channels a worker opens beside its request connection (host functions, peer links) are reached this way.
// The token travels over the client's authenticated request connection, so only that client (or whom it
// tells) can connect.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpool/protocol/status.h"
#include "gpool/protocol/transport.h"

namespace gpool::worker {

class TokenListener {
 public:
  TokenListener() = default;
  TokenListener(const TokenListener&) = delete;
  TokenListener& operator=(const TokenListener&) = delete;
  ~TokenListener();

  // Listens on a free port of every address of this host and makes a fresh token of `bytes` random bytes.
  proto::Status open(uint32_t& port, std::vector<uint8_t>& token, size_t bytes = 16);
  // Listens on a Unix socket of a random name in the abstract namespace (`name` without its leading NUL),
  // reachable only from this host's network namespace, with a fresh 16-byte token.
  proto::Status openLocal(std::string& name, std::vector<uint8_t>& token);
  bool isOpen() const { return fd_ >= 0; }
  // Makes a wait in accept/acceptFd on another thread give up within a tenth of a second.
  void cancel() { cancelled_ = true; }
  // The first connection within `timeout_ms` to present the token as its first bytes (connections are
  // judged side by side as their bytes come; the others are closed, and counted in one line logged as
  // `what`'s); null when none came. The listener is closed either way.
  std::unique_ptr<proto::Transport> accept(int timeout_ms, const char* what);
  // The same, as the connected socket's descriptor (-1: none came).
  int acceptFd(int timeout_ms, const char* what);

  static constexpr int kTokenWaitMs = 5000;  // a connection sends its token at once, or it is not ours
  // Connections waiting to be accepted, and accepted ones waiting to be judged: others (anyone who can
  // reach the port, or read the socket's name in /proc/net/unix) cannot crowd the client out.
  static constexpr int kBacklog = 64;
  static constexpr size_t kMaxPending = 64;

 private:
  void close();
  int fd_ = -1;
  std::atomic<bool> cancelled_{false};
  std::vector<uint8_t> token_;
};

}  // namespace gpool::worker
