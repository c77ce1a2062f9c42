// The client's side of captured host copies (interposer/src/host_rows.h): a worker reads and writes the
// rows of copies the client registered, exactly, and nothing else of the client's memory.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/loopback_transport.h"
#include "host_rows.h"

using namespace gpool;

namespace {

// Sends `msg` for copy `id` with `data` after the id, as the worker does, and has the client serve it.
bool ask(proto::Transport& worker, proto::Transport& client, uint16_t msg, uint64_t id, const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> payload(sizeof id);
  std::memcpy(payload.data(), &id, sizeof id);
  payload.insert(payload.end(), data.begin(), data.end());
  proto::sendFrame(worker, msg, 0, id, payload.data(), payload.size());
  proto::FrameHeader h = proto::recvHeader(client, UINT32_MAX);
  return client::serveHostRows(client, h);
}

uint64_t addressOf(std::vector<uint8_t>& v, size_t at) { return reinterpret_cast<uint64_t>(v.data() + at); }

}  // namespace

TEST(HostRows, AWorkerReadsAndWritesExactlyTheRowsOfARegisteredCopy) {
  std::vector<uint8_t> memory(64);
  for (size_t i = 0; i < memory.size(); ++i) memory[i] = static_cast<uint8_t>(i);
  uint64_t id = client::registerHostRows({addressOf(memory, 4), 16, 8, 3});  // 3 rows of 8 bytes, 16 apart, from byte 4
  auto [worker, client] = proto::makeLoopbackPair();

  ASSERT_TRUE(ask(*worker, *client, proto::kMsgHostRead, id));
  std::vector<uint8_t> reply;
  proto::FrameHeader r = proto::recvFrame(*worker, reply, 1024);
  EXPECT_TRUE(r.flags & proto::kIsReply);
  std::vector<uint8_t> expected;
  for (size_t row = 0; row < 3; ++row) expected.insert(expected.end(), memory.begin() + 4 + 16 * row, memory.begin() + 12 + 16 * row);
  EXPECT_EQ(reply, expected);

  std::vector<uint8_t> rows(24, 0xee);
  ASSERT_TRUE(ask(*worker, *client, proto::kMsgHostWrite, id, rows));
  proto::recvFrame(*worker, reply, 1024);
  uint64_t answered = 0;
  ASSERT_EQ(reply.size(), sizeof answered);
  std::memcpy(&answered, reply.data(), sizeof answered);
  EXPECT_EQ(answered, id);
  for (size_t i = 0; i < memory.size(); ++i) {
    bool in_rows = i >= 4 && (i - 4) % 16 < 8 && (i - 4) / 16 < 3;
    EXPECT_EQ(memory[i], in_rows ? 0xee : i) << "byte " << i;  // the gaps between rows are untouched
  }
  client::forgetHostRows(id);
}

TEST(HostRows, AForgedOrMalformedRequestIsRefused) {
  std::vector<uint8_t> memory(64, 1);
  uint64_t id = client::registerHostRows({addressOf(memory, 0), 8, 8, 2});
  {
    auto [worker, client] = proto::makeLoopbackPair();
    EXPECT_FALSE(ask(*worker, *client, proto::kMsgHostRead, id + 1000));  // a copy never registered
  }
  {
    auto [worker, client] = proto::makeLoopbackPair();
    EXPECT_FALSE(ask(*worker, *client, proto::kMsgHostWrite, id, std::vector<uint8_t>(15, 9)));  // a row short
  }
  {
    auto [worker, client] = proto::makeLoopbackPair();
    EXPECT_FALSE(ask(*worker, *client, proto::kMsgHostWrite, id, std::vector<uint8_t>(64, 9)));  // past the rows
  }
  {
    auto [worker, client] = proto::makeLoopbackPair();
    EXPECT_FALSE(ask(*worker, *client, proto::kMsgHostRead, id, std::vector<uint8_t>(8, 0)));  // a read with a payload
  }
  {
    auto [worker, client] = proto::makeLoopbackPair();
    EXPECT_FALSE(ask(*worker, *client, 0x7777, id));  // not a request for rows
  }
  EXPECT_EQ(memory, std::vector<uint8_t>(64, 1));  // nothing was written
  client::forgetHostRows(id);
  {
    auto [worker, client] = proto::makeLoopbackPair();
    EXPECT_FALSE(ask(*worker, *client, proto::kMsgHostRead, id));  // forgotten
  }
}
