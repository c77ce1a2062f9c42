// Host functions (cuLaunchHostFunc, cuStreamAddCallback) run on the client, in stream order. When one's
// turn comes on its stream, the worker says so on a channel of its own (not the request connection, whose
// reader may be waiting on that very stream) and waits until the client says the function has returned;
// only then does work queued after it on the stream go on. docs/protocol.md, "Host functions".
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpool/protocol/status.h"
#include "gpool/protocol/transport.h"
#include "token_listener.h"

namespace gpool::worker {

class HostCallbacks {
 public:
  HostCallbacks() = default;
  HostCallbacks(const HostCallbacks&) = delete;
  HostCallbacks& operator=(const HostCallbacks&) = delete;
  ~HostCallbacks();

  // Listens on a new port (any address of this host); the client must connect within the accept timeout
  // and send `token` (16 random bytes) first. A thread of its own takes the connection as soon as it comes
  // (the client connects on the answer), so nobody else can fill the listener's queue meanwhile. Once
  // per worker.
  proto::Status open(uint32_t& port, std::vector<uint8_t>& token);
  // The same channel over shared memory, for a client of host identity `client` (proto::shmHostIdentity):
  // listens on an abstract Unix socket `name`; at the first function due, the client that presented
  // `token` gets a segment of two rings. kNotSupported when the client is on another host or namespace.
  proto::Status openLocal(const std::string& client, std::string& name, std::vector<uint8_t>& token);
  // Tells the client callback `id` is due and waits until it has returned; false when there is no channel
  // (never opened, the client never came, or it went away): the stream then goes on without it.
  bool run(uint64_t id);
  // A captured copy's client side (HostCopyCapture), at a replay: `fetch` asks the client for copy `id`'s
  // rows, `bytes` packed, into `into`; `deliver` gives it the rows at `from`. False as for `run` (the
  // copy then moves nothing), or when the client answers anything but exactly what was asked.
  bool fetch(uint64_t id, uint8_t* into, uint64_t bytes);
  bool deliver(uint64_t id, const uint8_t* from, uint64_t bytes);

  static constexpr int kAcceptTimeoutMs = 10000;

 private:
  void startTaking();                        // with mu_ held, once the listener is open
  std::unique_ptr<proto::Transport> take();  // on taker_: the client's connection, made a channel
  bool accept();                             // with mu_ held: the channel, once taker_ is done
  // Sends `msg` for `id` (with `data` after the id), then reads the reply into `reply`, which must be
  // `reply_bytes` long: with mu_ held; false (the channel closed) on any failure.
  bool exchange(uint16_t msg, uint64_t id, const uint8_t* data, uint64_t bytes, std::vector<uint8_t>& reply, uint64_t reply_bytes);
  std::mutex mu_;
  TokenListener listener_;
  bool opened_ = false;
  bool local_ = false;             // the channel is shared memory (openLocal)
  bool said_unreachable_ = false;  // a function was due with no channel to run it on: logged once
  std::unique_ptr<proto::Transport> channel_;
  std::thread taker_;
  std::unique_ptr<proto::Transport> taken_;  // taker_'s result, read after joining it
};

}  // namespace gpool::worker
