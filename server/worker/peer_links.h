// Server-to-server copies between the workers of one lease (issue 12). When two devices of a lease sit on
// hosts that cannot share memory through CUDA IPC, a copy between them goes straight from one worker to
// the other over TCP instead of through the client. The client sets a link up once per ordered pair of
// its workers:
//   1. the receiving worker listens (PeerListen) and hands the client a port and a 32-byte key;
//   2. the sending worker connects (PeerConnect) and presents the key's first half;
//   3. the receiving worker accepts (PeerAccept) the connection that presents it, and answers with the
//      second half, which the sender checks before it sends any data.
// Each copy is then a PeerSend on the sender and a PeerReceive on the receiver. A link carries one copy at
// a time: an 8-byte length (which must be the receiver's) and the bytes. A link that breaks, stalls or
// says something else is closed; the receiver reports the failure and the client relays the copy itself.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpool/protocol/status.h"
#include "gpool/protocol/transport.h"
#include "token_listener.h"

namespace gpool::worker {

class PeerLinks {
 public:
  // Reads or writes `n` bytes at `offset` of the copy's device range, through the staging buffer.
  using Move = std::function<proto::Status(uint8_t* staging, uint64_t offset, uint64_t n)>;

  // A new listen ends one that was never accepted (its sender could not connect).
  proto::Status listen(uint32_t& port, std::vector<uint8_t>& key, uint32_t& link);
  proto::Status connect(const std::string& host, uint32_t port, const std::vector<uint8_t>& key, uint32_t& link);
  proto::Status accept(uint32_t link);
  // The sender's half of a copy of `bytes`, read from the device piece by piece with `read`. A broken link
  // is closed and this still succeeds: the receiver's failure is the copy's.
  proto::Status send(uint32_t link, uint64_t bytes, uint8_t* staging, uint64_t chunk, const Move& read);
  // The receiver's half: the sender's bytes, written to the device with `write`.
  proto::Status receive(uint32_t link, uint64_t bytes, uint8_t* staging, uint64_t chunk, const Move& write);

  // This worker's server was told to make no links (gpool-server --no-peer-links): listen and connect
  // answer CUDA_ERROR_NOT_SUPPORTED.
  void refuse() { refused_ = true; }

  static constexpr size_t kKeyBytes = 32;
  static constexpr int kAcceptTimeoutMs = 5000;
  static constexpr int kConnectTimeoutMs = 3000;
  static constexpr int kStallTimeoutMs = 30000;  // a peer that stops mid-copy for this long loses its link
  static constexpr size_t kMaxLinks = 64;

 private:
  struct Link {
    std::unique_ptr<TokenListener> listener;  // a receiving link until it accepted
    std::vector<uint8_t> answer;              // the key's second half: sent by a receiver, checked by a sender
    std::unique_ptr<proto::Transport> channel;
    bool sending = false, answered = false;
  };
  Link* find(uint32_t link, bool sending);
  void drop(uint32_t link, const char* why);
  uint32_t add(Link link);

  std::map<uint32_t, Link> links_;
  uint32_t next_ = 1;
  bool refused_ = false;
};

}  // namespace gpool::worker
