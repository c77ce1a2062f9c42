// A raw protocol client for tests: builds frames by hand, including broken ones.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <tuple>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/transport.h"

namespace gpool::test {

class RawClient {
 public:
  explicit RawClient(proto::Transport& t) : t_(t) {}

  template <typename C, typename... A>
  std::vector<uint8_t> payload(A&&... a) {
    typename C::in::tuple ins{std::forward<A>(a)...};
    std::vector<uint8_t> p;
    proto::Writer w(p);
    std::apply([&](const auto&... v) { w.putAll(v...); }, ins);
    return p;
  }
  void send(uint16_t msg, uint16_t flags, const std::vector<uint8_t>& p) {
    proto::sendFrame(t_, msg, flags, ++seq_, p.data(), p.size());
  }
  // Returns status and reply fields.
  template <typename C, typename... A>
  std::pair<proto::Status, typename C::out::tuple> call(A&&... a) {
    send(C::id, proto::kWantsReply, payload<C>(std::forward<A>(a)...));
    return read<C>();
  }
  // A request the client library sends for itself (proto::kAside).
  template <typename C, typename... A>
  std::pair<proto::Status, typename C::out::tuple> aside(A&&... a) {
    send(C::id, proto::kWantsReply | proto::kAside, payload<C>(std::forward<A>(a)...));
    return read<C>();
  }
  template <typename C, typename... A>
  void post(A&&... a) {
    send(C::id, 0, payload<C>(std::forward<A>(a)...));
  }
  template <typename C>
  std::pair<proto::Status, typename C::out::tuple> read() {
    std::vector<uint8_t> p;
    proto::FrameHeader h = proto::recvFrame(t_, p, proto::kMaxRequestPayload);
    EXPECT_EQ(h.msg, C::id);
    EXPECT_EQ(h.seq, seq_);
    EXPECT_TRUE(h.flags & proto::kIsReply);
    proto::Reader r(p.data(), p.size());
    proto::Status st = -1;
    typename C::out::tuple outs{};
    EXPECT_TRUE(r.get(st));
    EXPECT_TRUE(std::apply([&](auto&... o) { return r.getAll(o...); }, outs));
    return {st, outs};
  }
  proto::Status readStatusOnly(uint16_t msg) {
    std::vector<uint8_t> p;
    proto::FrameHeader h = proto::recvFrame(t_, p, proto::kMaxRequestPayload);
    EXPECT_EQ(h.msg, msg);
    proto::Status st = -1;
    if (p.size() >= 4) std::memcpy(&st, p.data(), 4);
    return st;
  }

 private:
  proto::Transport& t_;
  uint64_t seq_ = 0;
};

}  // namespace gpool::test
