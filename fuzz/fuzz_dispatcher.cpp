// The worker's request loop (server/worker/dispatcher.h) on the sim backend, fed a session of requests by a
// client that may send anything: each input is a sequence of frames, each a call of calls.def (or a control
// message) with a payload of the input's bytes. What a bad client must not do: crash or corrupt the worker
// (AddressSanitizer, UndefinedBehaviorSanitizer), leave a request it waits for unanswered while the
// connection stays up, or keep the worker from stopping when its lease ends (Dispatcher::stop).
//
// Input: frames of [call: u16, an index into the table below][flags: u8][length: u16][payload], until the
// input ends. Handles and device addresses are the worker's to choose, so a payload may name what the
// worker handed out earlier in the session: 7 bytes 0xAB then k stand for the k-th 8-byte value of its replies,
// counted from the latest reply's first (fuzz/make_dispatcher_seeds.py writes seeds that use them).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "dispatcher.h"
#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/loopback_transport.h"
#include "sim_backend.h"

namespace {

using namespace gpool;

constexpr uint16_t kIds[] = {
#define X(name, number, mode, ins, outs) number,
#include "gpool/protocol/calls.def"
#undef X
    proto::kMsgMemcpyDtoH, proto::kMsgAlive, proto::kMsgOutput,
};
constexpr size_t kMaxFrames = 48;
constexpr uint64_t kMemory = 64ull << 20;  // the sim device's memory and the lease's: what a session may hold
constexpr auto kReplyWait = std::chrono::seconds(5);
constexpr auto kStopWait = std::chrono::seconds(5);
constexpr uint8_t kMark = 0xAB;

// What the worker sent back, read on a thread of its own so that the worker never blocks on a full pipe.
struct Replies {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<uint8_t>> by_seq;
  std::deque<uint64_t> values;  // 8-byte values of replies: the latest reply's first, in its order
  bool closed = false;

  void read(proto::Transport& t) {
    try {
      for (;;) {
        std::vector<uint8_t> payload;
        proto::FrameHeader h = proto::recvFrame(t, payload, proto::kMaxRequestPayload);
        std::lock_guard lock(mu);
        if (!(h.flags & proto::kIsReply)) continue;  // (output, host functions due: nothing to answer here)
        std::vector<uint64_t> words;  // (a reply is its status, 4 bytes, then its values)
        for (size_t at = 4; at + 8 <= payload.size() && at < 36; at += 8) {
          uint64_t v;
          std::memcpy(&v, payload.data() + at, 8);
          words.push_back(v);
        }
        values.insert(values.begin(), words.begin(), words.end());
        if (values.size() > 16) values.resize(16);
        by_seq[h.seq] = std::move(payload);
        cv.notify_all();
      }
    } catch (const std::exception&) {
    }
    std::lock_guard lock(mu);
    closed = true;
    cv.notify_all();
  }
  // True once `seq` was answered, false when the connection ended first; aborts when neither comes.
  bool await(uint64_t seq) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, kReplyWait, [&] { return closed || by_seq.count(seq); })) {
      std::fprintf(stderr, "fuzz_dispatcher: request %llu neither answered nor its connection ended\n", static_cast<unsigned long long>(seq));
      std::abort();
    }
    return by_seq.count(seq) > 0;
  }
  // The status `seq` was answered with (-1: none).
  int statusOf(uint64_t seq) {
    std::lock_guard lock(mu);
    auto it = by_seq.find(seq);
    if (it == by_seq.end() || it->second.size() < 4) return -1;
    int32_t st;
    std::memcpy(&st, it->second.data(), 4);  // (a copy to the host: after its bytes)
    return st;
  }
  // Each 7-byte mark and index in `payload` becomes a value the worker handed out.
  void fillIn(std::vector<uint8_t>& payload) {
    std::lock_guard lock(mu);
    if (values.empty()) return;
    for (size_t at = 0; at + 8 <= payload.size(); ++at) {
      if (!std::all_of(payload.begin() + at, payload.begin() + at + 7, [](uint8_t b) { return b == kMark; })) continue;
      uint64_t v = values[payload[at + 7] % values.size()];
      std::memcpy(payload.data() + at, &v, 8);
      at += 7;
    }
  }
};

struct Frame {
  uint16_t msg;
  uint16_t flags;
  std::vector<uint8_t> payload;
};

std::vector<Frame> framesOf(const uint8_t* data, size_t size) {
  std::vector<Frame> frames;
  size_t at = 0;
  while (at + 5 <= size && frames.size() < kMaxFrames) {
    Frame f;
    f.msg = kIds[(data[at] | data[at + 1] << 8) % std::size(kIds)];
    uint8_t flags = data[at + 2];
    f.flags = (flags & 1 ? 0 : proto::kWantsReply) | (flags & 2 ? proto::kAside : 0);
    size_t n = std::min<size_t>(data[at + 3] | data[at + 4] << 8, size - at - 5);
    f.payload.assign(data + at + 5, data + at + 5 + n);
    frames.push_back(std::move(f));
    at += 5 + n;
  }
  return frames;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<Frame> frames = framesOf(data, size);
  if (frames.empty()) return 0;
  auto ends = proto::makeLoopbackPair();
  proto::Transport& client = *ends.first;
  worker::SimOptions options;
  options.memory_bytes = kMemory;
  worker::SimBackend backend(options);
  proto::HelloReply hello;
  if (backend.open(0, hello) != 0) std::abort();
  worker::Dispatcher dispatcher(backend, *ends.second, kMemory);
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool done = false;
  std::thread serving([&] {
    dispatcher.serve();
    std::lock_guard lock(done_mu);
    done = true;
    done_cv.notify_all();
  });
  Replies replies;
  std::thread reading([&] { replies.read(client); });

  static const bool verbose = std::getenv("FUZZ_DISPATCHER_SAYS") != nullptr;  // each request's status (writing seeds)
  uint64_t seq = 1;
  for (Frame& f : frames) {
    replies.fillIn(f.payload);
    try {
      proto::sendFrame(client, f.msg, f.flags, seq, f.payload.data(), f.payload.size());
    } catch (const std::exception&) {
      break;  // the worker ended the connection: a bad request costs its own connection
    }
    if ((f.flags & proto::kWantsReply) && !replies.await(seq)) break;
    if (verbose) std::fprintf(stderr, "0x%04x (%zu bytes): status %d\n", f.msg, f.payload.size(), replies.statusOf(seq));
    ++seq;
  }
  // The lease ends: the worker stops serving, whatever the client left it doing.
  dispatcher.stop("the fuzzer's session ended");
  {
    std::unique_lock lock(done_mu);
    if (!done_cv.wait_for(lock, kStopWait, [&] { return done; })) {
      std::fprintf(stderr, "fuzz_dispatcher: the worker did not stop within 5 s of its lease's end\n");
      std::abort();
    }
  }
  serving.join();
  // As gpool-worker does next: what the client imported is let go of, its exports ended (client_departure.cpp
  // frees the rest when other processes hold some of its memory, which none does here).
  if (dispatcher.importersHold()) {
    std::fprintf(stderr, "fuzz_dispatcher: memory held by importers, with no other process\n");
    std::abort();
  }
  client.shutdown();
  reading.join();
  return 0;
}
