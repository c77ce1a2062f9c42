// Serves one client connection: reads frames, checks them, runs them on a Backend in order, latches
// asynchronous errors and writes replies. A protocol violation ends this connection only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/transport.h"

namespace gpool::worker {

struct ServeResult {
  bool clean = false;  // the client closed the connection
  std::string reason;  // why serving stopped, for the log
  uint64_t frames = 0;
};

class Dispatcher {
 public:
  Dispatcher(Backend& backend, proto::Transport& transport) : backend_(backend), transport_(transport) {}
  // Runs until the client disconnects or violates the protocol.
  ServeResult serve();

 private:
  void handle(const proto::FrameHeader& h);
  void reply(const proto::FrameHeader& h, const std::vector<uint8_t>& payload);
  // A reply that carries only a status (refusals, unknown messages).
  void replyStatus(const proto::FrameHeader& h, Status st);
  void memcpyDtoH(const proto::FrameHeader& h);
  template <typename C>
  void dispatch(const proto::FrameHeader& h, typename C::handler Backend::*method);

  Backend& backend_;
  proto::Transport& transport_;
  std::vector<uint8_t> payload_;
  std::vector<uint8_t> out_;
  Status latched_ = 0;  // first failure of a call nobody waited for
};

}  // namespace gpool::worker
