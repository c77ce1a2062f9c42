// The rows of captured host copies (host_rows.h).
#include "host_rows.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "gpool/protocol/calls.h"
#include "host_work_order.h"
#include "log.h"

namespace gpool::client {

namespace {

struct Registered {
  std::mutex mu;
  std::unordered_map<uint64_t, HostRows> copies;  // by copy id; kept while a graph may replay them
  uint64_t next_id = 1;
};
// Never destroyed: the channels' threads are detached and may still serve while the process exits.
Registered& registered() {
  static Registered* r = new Registered;
  return *r;
}

bool rowsOf(uint64_t id, HostRows& rows) {
  Registered& r = registered();
  std::lock_guard lock(r.mu);
  auto it = r.copies.find(id);
  if (it == r.copies.end()) return false;
  rows = it->second;
  return true;
}

}  // namespace

uint64_t registerHostRows(const HostRows& rows) {
  Registered& r = registered();
  std::lock_guard lock(r.mu);
  uint64_t id = r.next_id++;
  r.copies[id] = rows;
  return id;
}

void forgetHostRows(uint64_t id) {
  Registered& r = registered();
  std::lock_guard lock(r.mu);
  r.copies.erase(id);
}

bool serveHostRows(proto::Transport& channel, const proto::FrameHeader& h) {
  uint64_t id = 0;
  HostRows rows;
  if ((h.msg != proto::kMsgHostRead && h.msg != proto::kMsgHostWrite) || h.length < sizeof id) return false;
  channel.recv(&id, sizeof id);
  const bool known = rowsOf(id, rows);
  if (!known || h.length != (h.msg == proto::kMsgHostRead ? sizeof id : sizeof id + rows.bytes())) {
    GPOOL_LOG(Level::kWarn, "the worker asked for the rows of a captured copy this process does not have (%llu, %u bytes); "
              "closing the host-function channel", (unsigned long long)id, h.length);
    return false;
  }
  std::vector<uint8_t> packed(rows.bytes());
  if (h.msg == proto::kMsgHostRead) {
    packRows(packed.data(), reinterpret_cast<const uint8_t*>(rows.addr), rows.pitch, rows.width, rows.height);
    publishHostWork();
    proto::sendFrame(channel, h.msg, proto::kIsReply, h.seq, packed.data(), packed.size());
    return true;
  }
  channel.recv(packed.data(), packed.size());
  unpackRows(reinterpret_cast<uint8_t*>(rows.addr), rows.pitch, packed.data(), rows.width, rows.height);
  publishHostWork();
  proto::sendFrame(channel, h.msg, proto::kIsReply, h.seq, &id, sizeof id);
  return true;
}

}  // namespace gpool::client
