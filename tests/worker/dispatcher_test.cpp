// The worker's request loop against crafted frames over the in-memory transport, sim backend.
#include <cuda.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <thread>

#include "dispatcher.h"
#include "gpool/protocol/shm_transport.h"
#include "gpool/protocol/transport.h"
#include "host_callbacks.h"
#include "../protocol/loopback_listener.h"
#include "ipc_registry.h"
#include "test_client.h"
#include "worker_harness.h"

using namespace gpool;
using namespace gpool::proto;
namespace calls = gpool::proto::calls;

namespace {

using cu::kInvalidHandle, cu::kInvalidValue, cu::kNotSupported, cu::kOutOfMemory;
using test::Harness;

}  // namespace

TEST(Dispatcher, ServesAllocationsCopiesAndFrees) {
  Harness h;
  test::RawClient c(*h.client);
  auto [st, out] = c.call<calls::MemAlloc>(uint64_t{1024});
  ASSERT_EQ(st, 0);
  uint64_t p = std::get<0>(out).ptr;
  EXPECT_NE(p, 0u);
  c.post<calls::MemcpyHtoD>(DevWrite{p + 10, Blob{"hello", 5}}, uint64_t{0}, 0u);
  c.send(kMsgMemcpyDtoH, kWantsReply, [&] {
    std::vector<uint8_t> v;
    Writer(v).putAll(p + 10, uint64_t{5}, uint64_t{0});
    return v;
  }());
  std::vector<uint8_t> reply;
  FrameHeader fh = recvFrame(*h.client, reply, 1024);
  ASSERT_EQ(fh.length, 5u + 4u);
  EXPECT_EQ(std::string(reply.begin(), reply.begin() + 5), "hello");
  EXPECT_EQ(reply[5] | reply[6] | reply[7] | reply[8], 0);
  EXPECT_EQ(c.call<calls::MemFree>(p).first, 0);
  auto r = h.finish();
  EXPECT_TRUE(r.clean) << r.reason;
}

TEST(Dispatcher, BadHandlesAndRangesAnswerErrorsAndKeepServing) {
  Harness h;
  test::RawClient c(*h.client);
  EXPECT_EQ(c.call<calls::StreamSynchronize>(uint64_t{0xdeadbeef}).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::EventQuery>(uint64_t{12345}).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::ModuleGetFunction>(ModuleRef{777, 0}, std::string("k")).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::LaunchKernel>(uint64_t{1}, 1u, 1u, 1u, 1u, 1u, 1u, 0u, uint64_t{0}, Blob{}, Blob{}).first, kInvalidHandle);
  auto [st, out] = c.call<calls::MemAlloc>(uint64_t{64});
  ASSERT_EQ(st, 0);
  uint64_t p = std::get<0>(out).ptr;
  // out of range: past the end, before the start, overflow, misaligned, freeing an interior pointer
  EXPECT_EQ(c.call<calls::MemcpyHtoD>(DevWrite{p + 60, Blob{"12345678", 8}}, uint64_t{0}, 0u).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyDtoD>(DevCopy{p, p - 8, 8}, uint64_t{0}, 0u).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::Memset>(DevFill{p, 4, UINT64_MAX / 2}, 0u, uint64_t{0}, 0u).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::Memset>(DevFill{p, 3, 1}, 0u, uint64_t{0}, 0u).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::Memset>(DevFill{p + 1, 2, 1}, 0u, uint64_t{0}, 0u).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemFree>(p + 8).first, kInvalidValue);
  // 2D regions: a pitch that overflows, a row wider than its pitch, rows past the end, a data blob
  // that is not the region's size, an absurd pitched allocation
  EXPECT_EQ(c.call<calls::MemcpyDtoH2D>(DevRect{p, UINT64_MAX / 2, 4, 3}, uint64_t{0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyDtoH2D>(DevRect{p, 8, 16, 2}, uint64_t{0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyDtoH2D>(DevRect{p, 16, 16, 5}, uint64_t{0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyDtoH2D>(DevRect{p, 16, 16, 4}, uint64_t{0}).first, 0);
  EXPECT_EQ(c.call<calls::MemcpyHtoD2D>(DevWriteRect{DevRect{p, 16, 4, 2}, Blob{"1234567", 7}}, uint64_t{0}, 0u).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyDtoD2D>(DevCopyRect{DevRect{p, 16, 4, 2}, DevRect{p + 32, 16, 4, 3}}, uint64_t{0}, 0u).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::Memset2D>(DevFillRect{DevRect{p, 16, 6, 2}, 4}, 0u, uint64_t{0}, 0u).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemAllocPitch>(PitchedAlloc{UINT64_MAX - 8, 2, 4}).first, kOutOfMemory);
  EXPECT_EQ(c.call<calls::MemAllocPitch>(PitchedAlloc{1 << 20, uint64_t{1} << 50, 4}).first, kOutOfMemory);
  EXPECT_EQ(c.call<calls::MemAllocPitch>(PitchedAlloc{64, 2, 3}).first, kInvalidValue);
  // absurd sizes
  EXPECT_EQ(c.call<calls::MemAlloc>(uint64_t{1} << 62).first, kOutOfMemory);
  EXPECT_EQ(c.call<calls::MemAlloc>(uint64_t{0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::ModuleLoad>(Blob{"garbage!", 8}, 0u).first, 200 /*CUDA_ERROR_INVALID_IMAGE*/);
  // a device-to-host copy of a bad range is refused with the status alone
  std::vector<uint8_t> req;
  Writer(req).putAll(p, uint64_t{1} << 40, uint64_t{0});
  c.send(kMsgMemcpyDtoH, kWantsReply, req);
  EXPECT_EQ(c.readStatusOnly(kMsgMemcpyDtoH), kInvalidValue);
  // still serving
  EXPECT_EQ(c.call<calls::MemFree>(p).first, 0);
  EXPECT_TRUE(h.finish().clean);
}

// An empty rectangle (no bytes per row, or no rows) copies and fills nothing, however many rows or
// bytes it names otherwise: the worker answers at once instead of walking 2^63 empty rows.
TEST(Dispatcher, EmptyRectanglesAreAnsweredAtOnce) {
  Harness h;
  test::RawClient c(*h.client);
  auto [st, out] = c.call<calls::MemAlloc>(uint64_t{64});
  ASSERT_EQ(st, 0);
  uint64_t p = std::get<0>(out).ptr;
  constexpr uint64_t kRows = uint64_t{1} << 63;
  auto answered = std::async(std::launch::async, [&] {
    std::vector<Status> got;
    got.push_back(c.call<calls::MemcpyHtoD2D>(DevWriteRect{DevRect{p, 0, 0, kRows}, Blob{}}, uint64_t{0}, 0u).first);
    got.push_back(c.call<calls::MemcpyDtoH2D>(DevRect{p, 0, 0, kRows}, uint64_t{0}).first);
    got.push_back(c.call<calls::MemcpyDtoD2D>(DevCopyRect{DevRect{p, 0, 0, kRows}, DevRect{p, 0, 0, kRows}}, uint64_t{0}, 0u).first);
    got.push_back(c.call<calls::Memset2D>(DevFillRect{DevRect{p, 0, 0, kRows}, 1}, 0u, uint64_t{0}, 0u).first);
    got.push_back(c.call<calls::MemcpyDtoH2D>(DevRect{p, 64, 64, 0}, uint64_t{0}).first);
    return got;
  });
  if (answered.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "the worker did not answer empty rectangles within 20 s";
    std::fflush(nullptr);
    std::_Exit(1);  // (its thread walks the rows still: nothing to join)
  }
  EXPECT_EQ(answered.get(), std::vector<Status>(5, 0));
  EXPECT_EQ(c.call<calls::MemFree>(p).first, 0);
  EXPECT_TRUE(h.finish().clean);
}

// CUDA arrays: shapes gpool does not take are refused, each array is charged to the lease until it is
// destroyed, and every copy must lie inside a live array of this client.
TEST(Dispatcher, ArraysAreCheckedChargedAndCopiedOnlyWithinThemselves) {
  Harness h;
  test::RawClient c(*h.client);
  constexpr uint32_t kFloat = 0x20;
  // shapes: three channels, a planar video format, no width, sparse, an unsquare cube, a dimension too
  // large, and one so large it passes every check but the lease's memory
  EXPECT_EQ(c.call<calls::ArrayCreate>(ArrayShape{16, 4, 0, kFloat, 3, 0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::ArrayCreate>(ArrayShape{16, 4, 0, 0xb0, 1, 0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::ArrayCreate>(ArrayShape{0, 4, 0, kFloat, 1, 0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::ArrayCreate>(ArrayShape{16, 4, 0, kFloat, 1, 0x40}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::ArrayCreate>(ArrayShape{16, 8, 6, kFloat, 1, 0x04}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::ArrayCreate>(ArrayShape{uint64_t{1} << 20, 1, 0, kFloat, 4, 0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::ArrayCreate>(ArrayShape{(1 << 20) - 1, (1 << 20) - 1, (1 << 20) - 1, kFloat, 4, 0}).first, kOutOfMemory);

  const uint64_t free_before = std::get<0>(c.call<calls::MemGetInfo>().second).free;
  auto [st, out] = c.call<calls::ArrayCreate>(ArrayShape{16, 4, 0, kFloat, 1, 0});  // 4 rows of 64 bytes
  ASSERT_EQ(st, 0);
  const uint64_t a = std::get<0>(out).v;
  EXPECT_EQ(free_before - std::get<0>(c.call<calls::MemGetInfo>().second).free, 256u);

  std::string rows(128, 'x');
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<char>('a' + i % 26);
  EXPECT_EQ(c.call<calls::MemcpyHtoA2D>(ArrayWrite{ArrayRect{a, 0, 1, 0, 64, 2}, Blob{rows.data(), rows.size()}}, uint64_t{0}, 0u).first, 0);
  auto [rst, back] = c.call<calls::MemcpyAtoH2D>(ArrayRect{a, 0, 1, 0, 64, 2}, uint64_t{0});
  ASSERT_EQ(rst, 0);
  EXPECT_EQ(std::string(std::get<0>(back).begin(), std::get<0>(back).end()), rows);
  // rectangles: past a row's end, past the last row, a slice it lacks, a part of an element, empty,
  // another's array, data not the rectangle's size
  EXPECT_EQ(c.call<calls::MemcpyAtoH2D>(ArrayRect{a, 60, 0, 0, 8, 1}, uint64_t{0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyAtoH2D>(ArrayRect{a, 0, 3, 0, 64, 2}, uint64_t{0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyAtoH2D>(ArrayRect{a, 0, 0, 1, 64, 1}, uint64_t{0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyAtoH2D>(ArrayRect{a, 2, 0, 0, 4, 1}, uint64_t{0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyAtoH2D>(ArrayRect{a, 0, 0, 0, 0, 1}, uint64_t{0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyAtoH2D>(ArrayRect{a + 8, 0, 0, 0, 4, 1}, uint64_t{0}).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::MemcpyAtoH2D>(ArrayRect{UINT64_MAX, UINT64_MAX - 3, UINT64_MAX, 0, 8, UINT64_MAX}, uint64_t{0}).first,
            kInvalidHandle);
  EXPECT_EQ(c.call<calls::MemcpyHtoA2D>(ArrayWrite{ArrayRect{a, 0, 0, 0, 64, 2}, Blob{rows.data(), 127}}, uint64_t{0}, 0u).first,
            kInvalidValue);
  // device ends: the region must be the client's memory, and the same size as the rectangle
  auto [mst, mem] = c.call<calls::MemAlloc>(uint64_t{256});
  ASSERT_EQ(mst, 0);
  const uint64_t p = std::get<0>(mem).ptr;
  EXPECT_EQ(c.call<calls::MemcpyAtoD2D>(ArrayDevCopy{ArrayRect{a, 0, 1, 0, 64, 2}, DevRect{p, 64, 64, 2}}, uint64_t{0}, 0u).first, 0);
  EXPECT_EQ(c.call<calls::MemcpyAtoD2D>(ArrayDevCopy{ArrayRect{a, 0, 0, 0, 64, 4}, DevRect{p + 64, 64, 64, 4}}, uint64_t{0}, 0u).first,
            kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyDtoA2D>(ArrayDevCopy{ArrayRect{a, 0, 0, 0, 64, 2}, DevRect{p, 64, 32, 2}}, uint64_t{0}, 0u).first,
            kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyDtoA2D>(ArrayDevCopy{ArrayRect{a, 0, 0, 0, 64, 1}, DevRect{p + 1024, 64, 64, 1}}, uint64_t{0}, 0u).first,
            kInvalidValue);
  EXPECT_EQ(c.call<calls::MemcpyDtoA2D>(ArrayDevCopy{ArrayRect{a, 0, 0, 0, 64, 2}, DevRect{p, 64, 64, 2}}, uint64_t{0}, 0u).first, 0);
  auto [dst2, top] = c.call<calls::MemcpyAtoH2D>(ArrayRect{a, 0, 0, 0, 64, 2}, uint64_t{0});
  EXPECT_EQ(std::string(std::get<0>(top).begin(), std::get<0>(top).end()), rows);  // rows 1-2 came back as rows 0-1

  EXPECT_EQ(c.call<calls::ArrayDestroy>(a).first, 0);
  EXPECT_EQ(std::get<0>(c.call<calls::MemGetInfo>().second).free, free_before - 256);  // (the 256-byte allocation)
  EXPECT_EQ(c.call<calls::ArrayDestroy>(a).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::MemcpyAtoH2D>(ArrayRect{a, 0, 0, 0, 64, 1}, uint64_t{0}).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::MemFree>(p).first, 0);
  EXPECT_TRUE(h.finish().clean);
}

// Texture and surface objects: the resource must be the client's array or lie in its memory, the
// descriptors must be their structs' sizes, and only what this client made can be destroyed, once.
TEST(Dispatcher, TextureResourcesAreTheClientsOwnAndDescriptorsWholeStructs) {
  Harness h;
  test::RawClient c(*h.client);
  constexpr uint32_t kFloat = 0x20;
  auto [ast, aout] = c.call<calls::ArrayCreate>(ArrayShape{16, 4, 0, kFloat, 1, 0x02});
  ASSERT_EQ(ast, 0);
  const uint64_t a = std::get<0>(aout).v;
  auto [mst, mem] = c.call<calls::MemAlloc>(uint64_t{4096});
  ASSERT_EQ(mst, 0);
  const uint64_t p = std::get<0>(mem).ptr;
  const TexDescs descs{std::vector<uint8_t>(TexDescs::kTextureBytes), {}};
  auto linear = [&](uint64_t ptr, uint64_t bytes) { return TexResource{2, 0, ptr, bytes, 0, 0, 0, kFloat, 1, 0}; };
  auto rows = [&](uint64_t pitch, uint64_t width, uint64_t height) { return TexResource{3, 0, p, 0, pitch, width, height, kFloat, 1, 0}; };
  // resources: another's array, memory past the allocation, before it, misaligned, rows wider than
  // their pitch, rows past the allocation, a format gpool does not take, three channels, flags, an array
  // named as a mipmap, a type CUDA lacks
  EXPECT_EQ(c.call<calls::TexObjectCreate>(TexResource{0, a + 8}, descs).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(linear(p, 4097), descs).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(linear(p - 64, 64), descs).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(linear(p + 2, 64), descs).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(rows(64, 17, 4), descs).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(rows(512, 16, 9), descs).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(rows(UINT64_MAX / 2, 16, 3), descs).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(TexResource{2, 0, p, 64, 0, 0, 0, 0xb0, 1, 0}, descs).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(TexResource{2, 0, p, 64, 0, 0, 0, kFloat, 3, 0}, descs).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(TexResource{0, a, 0, 0, 0, 0, 0, 0, 0, 1}, descs).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(TexResource{1, a}, descs).first, kInvalidHandle);  // (an array is no mipmap)
  EXPECT_EQ(c.call<calls::TexObjectCreate>(TexResource{9, a}, descs).first, kInvalidValue);
  // descriptors: short, long, a view of the wrong size
  EXPECT_EQ(c.call<calls::TexObjectCreate>(TexResource{0, a}, TexDescs{std::vector<uint8_t>(8), {}}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(TexResource{0, a}, TexDescs{std::vector<uint8_t>(4096), {}}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(TexResource{0, a}, TexDescs{std::vector<uint8_t>(TexDescs::kTextureBytes), std::vector<uint8_t>(3)}).first,
            kInvalidValue);
  // what is fine, and ends once
  auto [tst, tout] = c.call<calls::TexObjectCreate>(TexResource{0, a}, descs);
  ASSERT_EQ(tst, 0);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(linear(p, 4096), descs).first, 0);
  EXPECT_EQ(c.call<calls::TexObjectCreate>(rows(512, 16, 8), descs).first, 0);
  const uint64_t t = std::get<0>(tout).v;
  EXPECT_EQ(c.call<calls::TexObjectDestroy>(t).first, 0);
  EXPECT_EQ(c.call<calls::TexObjectDestroy>(t).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::SurfObjectDestroy>(t).first, kInvalidHandle);  // (a texture is no surface)
  auto [sst, sout] = c.call<calls::SurfObjectCreate>(TexResource{0, a});
  ASSERT_EQ(sst, 0);
  EXPECT_EQ(c.call<calls::SurfObjectDestroy>(std::get<0>(sout).v).first, 0);
  EXPECT_TRUE(h.finish().clean);
}

// The worker's standard output (what a GPU's printf writes) goes to a client that asked for it, before
// the next reply; to one that did not, never.
TEST(Dispatcher, RelaysTheWorkersOutputBeforeTheNextReplyOnceAsked) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  worker::OutputRelay relay(p[0]);
  Harness h({}, &relay);
  test::RawClient c(*h.client);
  auto say = [&](const std::string& text) { ASSERT_EQ(::write(p[1], text.data(), text.size()), static_cast<ssize_t>(text.size())); };
  say("held until asked\n");
  EXPECT_EQ(c.call<calls::CtxSynchronize>().first, 0);  // (the reply comes alone: call() checks it is the next frame)
  c.send(kMsgOutput, 0, {});
  say("hello from the GPU\n");
  c.send(calls::CtxSynchronize::id, kWantsReply, {});
  std::vector<uint8_t> payload;
  FrameHeader out = recvFrame(*h.client, payload, kMaxOutputFrame);
  EXPECT_EQ(out.msg, kMsgOutput);
  EXPECT_EQ(std::string(payload.begin(), payload.end()), "held until asked\nhello from the GPU\n");
  FrameHeader reply = recvFrame(*h.client, payload, 64);
  EXPECT_EQ(reply.msg, calls::CtxSynchronize::id);
  EXPECT_TRUE(reply.flags & kIsReply);
  EXPECT_EQ(c.call<calls::CtxSynchronize>().first, 0);  // nothing new: no Output frame
  // A flood between two replies is cut at what the worker holds, and says so.
  std::thread writer([&] {
    std::string chunk(1 << 16, 'x');
    for (size_t sent = 0; sent < worker::OutputRelay::kMaxHeld + (1 << 20); sent += chunk.size()) say(chunk);
  });
  writer.join();
  c.send(calls::CtxSynchronize::id, kWantsReply, {});
  std::string got;
  for (FrameHeader f = recvFrame(*h.client, payload, kMaxOutputFrame); f.msg == kMsgOutput; f = recvFrame(*h.client, payload, kMaxOutputFrame))
    got.append(payload.begin(), payload.end());
  EXPECT_EQ(got.size() - got.find('\n'), got.size() - worker::OutputRelay::kMaxHeld);
  EXPECT_NE(got.find("[gpool: 1048576 bytes of the GPU's output were dropped"), std::string::npos);
  ::close(p[1]);
  EXPECT_TRUE(h.finish().clean);
}

// A stream's attributes are checked as a launch's: a stream of this client's, one whole attribute, and
// an access policy window inside its memory.
TEST(Dispatcher, StreamAttributesAreCheckedAsLaunchAttributes) {
  Harness h;
  test::RawClient c(*h.client);
  auto [mst, mem] = c.call<calls::MemAlloc>(uint64_t{4096});
  ASSERT_EQ(mst, 0);
  const uint64_t p = std::get<0>(mem).ptr;
  auto window = [&](uint64_t base, uint64_t bytes) {
    CUlaunchAttribute a{};
    a.id = CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;
    a.value.accessPolicyWindow.base_ptr = reinterpret_cast<void*>(base);
    a.value.accessPolicyWindow.num_bytes = bytes;
    return a;
  };
  CUlaunchAttribute in = window(p, 4096), out = window(p, 8192), two[2] = {in, in};
  EXPECT_EQ(c.call<calls::StreamSetAttribute>(uint64_t{0xdead0000}, LaunchAttrs{Blob{&in, sizeof in}}).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::StreamSetAttribute>(uint64_t{0}, LaunchAttrs{Blob{&out, sizeof out}}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::StreamSetAttribute>(uint64_t{0}, LaunchAttrs{Blob{&in, sizeof in - 1}}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::StreamSetAttribute>(uint64_t{0}, LaunchAttrs{Blob{two, sizeof two}}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::StreamSetAttribute>(uint64_t{0}, LaunchAttrs{Blob{&in, sizeof in}}).first, 0);
  EXPECT_EQ(c.call<calls::StreamCopyAttributes>(uint64_t{0xdead0000}, uint64_t{0}).first, kInvalidHandle);
  EXPECT_TRUE(h.finish().clean);
}

// Mipmapped arrays: all levels charged at once; a level is the mipmap's array, which the client may copy
// to but not destroy, and which ends with the mipmap.
TEST(Dispatcher, MipmapLevelsAreTheMipmapsToChargeAndToEnd) {
  Harness h;
  test::RawClient c(*h.client);
  constexpr uint32_t kFloat = 0x20;
  EXPECT_EQ(c.call<calls::MipmappedArrayCreate>(MipmapShape{ArrayShape{16, 8, 0, kFloat, 1, 0}, 0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MipmappedArrayCreate>(MipmapShape{ArrayShape{16, 8, 0, kFloat, 1, 0}, 33}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MipmappedArrayCreate>(MipmapShape{ArrayShape{16, 8, 0, kFloat, 3, 0}, 2}).first, kInvalidValue);
  const uint64_t free_before = std::get<0>(c.call<calls::MemGetInfo>().second).free;
  auto [st, out] = c.call<calls::MipmappedArrayCreate>(MipmapShape{ArrayShape{16, 8, 0, kFloat, 1, 0}, 3});  // 16x8, 8x4, 4x2 floats
  ASSERT_EQ(st, 0);
  const uint64_t m = std::get<0>(out).v;
  EXPECT_EQ(free_before - std::get<0>(c.call<calls::MemGetInfo>().second).free, (128u + 32u + 8u) * 4u);
  EXPECT_EQ(c.call<calls::MipmappedArrayGetLevel>(MipmapLevel{m, 3}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MipmappedArrayGetLevel>(MipmapLevel{m + 8, 0}).first, kInvalidHandle);
  auto [lst, lout] = c.call<calls::MipmappedArrayGetLevel>(MipmapLevel{m, 2});
  ASSERT_EQ(lst, 0);
  const uint64_t level = std::get<0>(lout).v;
  std::string rows(32, 'm');  // level 2: 2 rows of 4 floats
  EXPECT_EQ(c.call<calls::MemcpyHtoA2D>(ArrayWrite{ArrayRect{level, 0, 0, 0, 16, 2}, Blob{rows.data(), rows.size()}}, uint64_t{0}, 0u).first, 0);
  EXPECT_EQ(c.call<calls::MemcpyAtoH2D>(ArrayRect{level, 0, 0, 0, 32, 1}, uint64_t{0}).first, kInvalidValue);  // wider than the level
  EXPECT_EQ(c.call<calls::ArrayDestroy>(level).first, kInvalidValue);  // the mipmap's, not the client's to end
  EXPECT_EQ(c.call<calls::TexObjectCreate>(TexResource{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, m},
                                           TexDescs{std::vector<uint8_t>(TexDescs::kTextureBytes), {}}).first, 0);
  EXPECT_EQ(c.call<calls::MipmappedArrayDestroy>(m).first, 0);
  EXPECT_EQ(std::get<0>(c.call<calls::MemGetInfo>().second).free, free_before);
  EXPECT_EQ(c.call<calls::MemcpyAtoH2D>(ArrayRect{level, 0, 0, 0, 16, 1}, uint64_t{0}).first, kInvalidHandle);  // ended with it
  EXPECT_EQ(c.call<calls::MipmappedArrayDestroy>(m).first, kInvalidHandle);
  EXPECT_TRUE(h.finish().clean);
}

TEST(Dispatcher, UnknownMessageIsAnsweredNotSupported) {
  Harness h;
  test::RawClient c(*h.client);
  c.send(0x7abc, kWantsReply, {1, 2, 3});
  EXPECT_EQ(c.readStatusOnly(0x7abc), kNotSupported);
  c.send(0x7abd, 0, {});  // without a reply: logged and skipped
  EXPECT_EQ(c.call<calls::CtxSynchronize>().first, 0);
  EXPECT_TRUE(h.finish().clean);
}

TEST(Dispatcher, AsyncFailureIsLatchedUntilTheNextWait) {
  Harness h;
  test::RawClient c(*h.client);
  c.post<calls::StreamWaitEvent>(uint64_t{0}, uint64_t{999}, 0u);  // bad event, nobody waits
  c.post<calls::MemFree>(uint64_t{42});                            // second failure: first one wins
  EXPECT_EQ(c.call<calls::CtxSynchronize>().first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::CtxSynchronize>().first, 0);  // reported once
  EXPECT_TRUE(h.finish().clean);
}

// A host copy offered for a capture goes one of two ways, over the client's memory, in one channel frame;
// on a stream that does not capture it is answered "not captured".
TEST(Dispatcher, AHostCopyIsOneWayOverTheClientsMemory) {
  Harness h;
  test::RawClient c(*h.client);
  auto [st, out] = c.call<calls::MemAlloc>(uint64_t{4096});
  ASSERT_EQ(st, 0);
  uint64_t p = std::get<0>(out).ptr;
  auto [sst, s] = c.call<calls::StreamCreate>(0u, int32_t{0});
  ASSERT_EQ(sst, 0);
  uint64_t stream = std::get<0>(s).v;
  auto offer = [&](uint32_t direction, DevRect rows) {
    return c.call<calls::HostCopyCapture>(HostRowsCopy{direction, rows}, stream, uint64_t{1});
  };
  EXPECT_EQ(offer(2, DevRect{p, 64, 64, 4}).first, kInvalidValue);                          // neither way
  EXPECT_EQ(offer(HostRowsCopy::kToDevice, DevRect{p + 4064, 64, 64, 1}).first, kInvalidValue);  // past the end
  EXPECT_EQ(offer(HostRowsCopy::kFromDevice, DevRect{p, 1, UINT64_MAX / 2, 3}).first, kInvalidValue);  // overflows
  auto [ost, captured] = offer(HostRowsCopy::kFromDevice, DevRect{p, 64, 64, 4});
  EXPECT_EQ(ost, 0);
  EXPECT_EQ(std::get<0>(captured), 0u);  // not capturing: the client copies as usual
  EXPECT_TRUE(h.finish().clean);
}

// The client library's own requests (kAside) answer for themselves: the failure stays for the program.
TEST(Dispatcher, AsideRequestsLeaveTheLatchForTheProgram) {
  Harness h;
  test::RawClient c(*h.client);
  c.post<calls::MemFree>(uint64_t{42});  // fails, nobody waits
  auto made = c.aside<calls::MemAlloc>(uint64_t{4096});
  EXPECT_EQ(made.first, 0);  // it ran
  EXPECT_EQ(c.aside<calls::MemFree>(uint64_t{7}).first, kInvalidValue);  // its own failure, not latched
  EXPECT_EQ(c.call<calls::CtxSynchronize>().first, kInvalidValue);       // the program's wait: MemFree(42)'s
  EXPECT_EQ(c.call<calls::CtxSynchronize>().first, 0);
  EXPECT_TRUE(h.finish().clean);
}

TEST(Dispatcher, MalformedRequestClosesTheConnection) {
  Harness h;
  test::RawClient c(*h.client);
  c.send(calls::MemAlloc::id, kWantsReply, {1, 2, 3});  // 3 bytes where a u64 is due
  std::vector<uint8_t> p;
  EXPECT_THROW(recvFrame(*h.client, p, 1024), TransportError);
  auto r = h.finish();
  EXPECT_FALSE(r.clean);
  EXPECT_NE(r.reason.find("malformed MemAlloc"), std::string::npos) << r.reason;
}

TEST(Dispatcher, TrailingBytesAreAViolation) {
  Harness h;
  test::RawClient c(*h.client);
  auto payload = c.payload<calls::MemAlloc>(uint64_t{8});
  payload.push_back(0);
  c.send(calls::MemAlloc::id, kWantsReply, payload);
  std::vector<uint8_t> p;
  EXPECT_THROW(recvFrame(*h.client, p, 1024), TransportError);
  EXPECT_FALSE(h.finish().clean);
}

TEST(Dispatcher, OversizedFrameClosesTheConnection) {
  Harness h;
  FrameHeader fh{kMaxRequestPayload + 1, calls::MemAlloc::id, kWantsReply, 1};
  ConstBuffer b{&fh, sizeof fh};
  h.client->send(std::span(&b, 1));
  std::vector<uint8_t> p;
  EXPECT_THROW(recvFrame(*h.client, p, 1024), TransportError);
  auto r = h.finish();
  EXPECT_FALSE(r.clean);
  EXPECT_NE(r.reason.find("exceeds the limit"), std::string::npos) << r.reason;
}

TEST(Dispatcher, TruncatedFrameEndsTheConnectionQuietly) {
  FaultPlan f;
  f.close_after_bytes = sizeof(FrameHeader) + 3;
  Harness h(f);
  test::RawClient c(*h.client);
  EXPECT_THROW(c.send(calls::MemAlloc::id, kWantsReply, c.payload<calls::MemAlloc>(uint64_t{8})), TransportError);
  h.thread.join();
  EXPECT_EQ(h.result.frames, 0u);
}

TEST(Dispatcher, ClientReplyFramesAreRefused) {
  Harness h;
  test::RawClient c(*h.client);
  c.send(calls::CtxSynchronize::id, kIsReply, {});
  std::vector<uint8_t> p;
  EXPECT_THROW(recvFrame(*h.client, p, 1024), TransportError);
  EXPECT_FALSE(h.finish().clean);
}

TEST(Dispatcher, EventsAndStreamsFollowCudaRules) {
  Harness h;
  test::RawClient c(*h.client);
  auto id = [](auto reply) { return std::get<0>(reply.second).v; };
  uint64_t s = id(c.call<calls::StreamCreate>(0u, 0));
  uint64_t e1 = id(c.call<calls::EventCreate>(0u)), e2 = id(c.call<calls::EventCreate>(0u));
  uint64_t e3 = id(c.call<calls::EventCreate>(2u /*CU_EVENT_DISABLE_TIMING*/));
  EXPECT_EQ(c.call<calls::EventElapsedTime>(e1, e2).first, kInvalidHandle);  // not recorded yet
  for (uint64_t e : {e1, e2, e3}) c.post<calls::EventRecord>(e, s, 0u);
  auto [st, ms] = c.call<calls::EventElapsedTime>(e1, e2);
  EXPECT_EQ(st, 0);
  EXPECT_GE(std::get<0>(ms), 0.0f);
  EXPECT_EQ(c.call<calls::EventElapsedTime>(e1, e3).first, kInvalidHandle);  // timing disabled
  EXPECT_EQ(c.call<calls::StreamDestroy>(s).first, 0);
  EXPECT_EQ(c.call<calls::StreamDestroy>(s).first, kInvalidHandle);  // a handle ends once
  EXPECT_EQ(c.call<calls::StreamSynchronize>(s).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::StreamSynchronize>(uint64_t{0}).first, 0);
  EXPECT_EQ(c.call<calls::StreamDestroy>(uint64_t{0}).first, kInvalidHandle);  // the default stream stays
  EXPECT_EQ(c.call<calls::EventDestroy>(e1).first, 0);
  EXPECT_EQ(c.call<calls::EventQuery>(e1).first, kInvalidHandle);
  EXPECT_TRUE(h.finish().clean);
}

// Random frames for every message number: the worker answers, or closes the connection, and never
// crashes or hangs. Payloads are random bytes, random truncations of valid encodings, or valid
// encodings carrying random handles, pointers and sizes.
TEST(Dispatcher, RandomFramesNeverCrashTheWorker) {
  std::vector<uint16_t> ids{kMsgMemcpyDtoH, calls::ModuleLoadCached::id, 0x0000, 0xffff};
#define X(name, number, mode, ins, outs) ids.push_back(number);
#include "gpool/protocol/calls.def"
#undef X
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto rnd = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int answered = 0, closed = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    Harness h;
    test::RawClient c(*h.client);
    uint16_t msg = ids[rnd() % ids.size()];
    std::vector<uint8_t> payload;
    switch (iter % 3) {
      case 0:
        payload.resize(rnd() % 64);
        break;
      case 1:  // plausible fields, then cut short
        for (int k = 0; k < 12; ++k) {
          uint64_t v = (rnd() % 4 == 0) ? rnd() % 16 : rnd();
          Writer(payload).put(v);
        }
        payload.resize(rnd() % (payload.size() + 1));
        break;
      case 2: {  // a well-formed request of a random call with random values
        std::vector<uint8_t> blob(rnd() % 300);
        for (auto& b : blob) b = static_cast<uint8_t>(rnd());
        auto fill = [&](auto& self, auto& v) -> void {
          using T = std::decay_t<decltype(v)>;
          if constexpr (WireStruct<T>) std::apply([&](auto&... f) { (self(self, f), ...); }, v.wireFields());
          else if constexpr (std::is_same_v<T, Blob>) v = Blob{blob.data(), blob.size()};
          else if constexpr (std::is_same_v<T, std::string>) v = std::string(rnd() % 20, 'k');
          else if constexpr (std::is_same_v<T, float>) v = static_cast<float>(rnd() % 1000);
          else if constexpr (IsVector<T>::value) v.assign(rnd() % 8, static_cast<typename T::value_type>(rnd()));
          else v = static_cast<T>(rnd() % 3 == 0 ? rnd() % 8 : rnd());
        };
        size_t pick = rnd() % (ids.size() - 4);
        size_t i = 0;
#define X(name, number, mode, ins, outs)                                         \
  if (i++ == pick) {                                                             \
    calls::name::in::tuple t;                                                    \
    std::apply([&](auto&... v) { (fill(fill, v), ...); }, t);                    \
    std::apply([&](const auto&... v) { Writer(payload).putAll(v...); }, t);      \
    msg = number;                                                                \
  }
#include "gpool/protocol/calls.def"
#undef X
        break;
      }
    }
    for (auto& b : payload)
      if (iter % 3 == 0) b = static_cast<uint8_t>(rnd());
    c.send(msg, kWantsReply, payload);
    // Whatever happened, the worker must still answer a valid call, or have closed the connection.
    try {
      std::vector<uint8_t> p;
      recvFrame(*h.client, p, 1 << 20);  // the reply to the random frame
      c.send(calls::CtxSynchronize::id, kWantsReply, {});
      FrameHeader fh = recvFrame(*h.client, p, 1 << 20);
      EXPECT_EQ(fh.msg, calls::CtxSynchronize::id);
      ++answered;
    } catch (const TransportError&) {
      ++closed;
    }
    h.finish();
  }
  EXPECT_EQ(answered + closed, 1500);
  std::printf("random frames: %d answered, %d connections closed\n", answered, closed);
  EXPECT_GT(closed, 0);    // malformed frames were refused
  EXPECT_GT(answered, 0);  // well-formed ones were served
}

// A function `k` of a PTX module the sim backend loads (its launches are recorded); 0 when that fails.
uint64_t simFunction(test::RawClient& c) {
  const char ptx[] = "// a PTX module\n.version 8.0\n";
  auto [st, mod] = c.call<calls::ModuleLoad>(Blob{ptx, sizeof ptx}, 0u);
  if (st != 0) return 0;
  auto [st2, fn] = c.call<calls::ModuleGetFunction>(std::get<0>(mod), std::string("k"));
  return st2 == 0 ? std::get<0>(fn).v : 0;
}

// The module a function came from is the worker's table's answer; a forged function has none.
TEST(Dispatcher, AFunctionsOwnerIsItsModule) {
  Harness h;
  test::RawClient c(*h.client);
  const char ptx[] = "// a PTX module\n.version 8.0\n";
  auto [st, mod] = c.call<calls::ModuleLoad>(Blob{ptx, sizeof ptx}, 0u);
  ASSERT_EQ(st, 0);
  const uint64_t module = std::get<0>(mod).handle;
  const uint64_t f = std::get<0>(c.call<calls::ModuleGetFunction>(std::get<0>(mod), std::string("k")).second).v;
  auto [ost, owner] = c.call<calls::LaunchableOwner>(f);
  ASSERT_EQ(ost, 0);
  EXPECT_EQ(std::get<0>(owner).handle, module);
  EXPECT_EQ(std::get<0>(owner).kind, 0u);
  EXPECT_EQ(c.call<calls::LaunchableOwner>(f + 1).first, kInvalidHandle);
  EXPECT_TRUE(h.finish().clean);
}

TEST(Dispatcher, OccupancyQueriesCheckHandlesAndClusterSizes) {
  Harness h;
  test::RawClient c(*h.client);
  uint64_t f = simFunction(c);
  ASSERT_NE(f, 0u);
  auto [s1, clusters] = c.call<calls::OccupancyMaxActiveClusters>(f, 8u, 1u, 1u, 128u, 1u, 1u, 0u, Blob{});
  EXPECT_EQ(s1, 0);
  EXPECT_GT(std::get<0>(clusters), 0);
  EXPECT_EQ(c.call<calls::OccupancyMaxActiveClusters>(uint64_t{5}, 8u, 1u, 1u, 128u, 1u, 1u, 0u, Blob{}).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::OccupancyMaxActiveClusters>(f, 8u, 1u, 1u, 128u, 1u, 1u, 0u, Blob{"abc", 3}).first, kInvalidValue);
  auto [s2, smem] = c.call<calls::OccupancyAvailableDynamicSMem>(f, 2, 256);
  EXPECT_EQ(s2, 0);
  EXPECT_GT(std::get<0>(smem), 0u);
  EXPECT_EQ(c.call<calls::OccupancyAvailableDynamicSMem>(f, 0, 256).first, kInvalidValue);
  EXPECT_TRUE(h.finish().clean);
}

TEST(Dispatcher, MemoryPoolsAreCheckedAndChargedToTheLease) {
  Harness h;  // 16 GiB sim device
  test::RawClient c(*h.client);
  EXPECT_EQ(c.call<calls::MemAllocFromPoolAsync>(uint64_t{64}, uint64_t{0xabc}, uint64_t{0}).first, kInvalidHandle);
  auto [st, created] = c.call<calls::MemPoolCreate>(1u /*pinned*/, 0u, uint64_t{0}, 0u);
  ASSERT_EQ(st, 0);
  uint64_t pool = std::get<0>(created).v;
  // Read-only counters and unknown attributes are refused; the release threshold stays within the lease.
  EXPECT_EQ(c.call<calls::MemPoolSetAttribute>(pool, PoolAttribute{5 /*reserved current*/, 0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemPoolSetAttribute>(pool, PoolAttribute{99, 0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemPoolSetAttribute>(pool, PoolAttribute{4 /*release threshold*/, UINT64_MAX}).first, 0);
  auto [st2, threshold] = c.call<calls::MemPoolGetAttribute>(pool, 4u);
  EXPECT_EQ(st2, 0);
  EXPECT_EQ(std::get<0>(threshold), worker::SimOptions{}.memory_bytes);
  // Pool allocations are charged like any other.
  EXPECT_EQ(c.call<calls::MemAllocFromPoolAsync>(uint64_t{1} << 62, pool, uint64_t{0}).first, kOutOfMemory);
  auto [st3, a] = c.call<calls::MemAllocFromPoolAsync>(uint64_t{4096}, pool, uint64_t{0});
  ASSERT_EQ(st3, 0);
  auto [st4, view] = c.call<calls::MemGetInfo>();
  EXPECT_EQ(std::get<0>(view).total - std::get<0>(view).free, 4096u);
  EXPECT_EQ(c.call<calls::MemFreeAsync>(std::get<0>(a).ptr, uint64_t{0}).first, 0);
  EXPECT_EQ(c.call<calls::MemFreeAsync>(std::get<0>(a).ptr, uint64_t{0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemPoolDestroy>(pool).first, 0);
  EXPECT_EQ(c.call<calls::MemPoolDestroy>(pool).first, kInvalidHandle);
  EXPECT_TRUE(h.finish().clean);
}

TEST(Dispatcher, VirtualMemoryIsCheckedAndChargedToTheLease) {
  Harness h;
  test::RawClient c(*h.client);
  const uint64_t g = 2u << 20;
  auto [st, va] = c.call<calls::MemAddressReserve>(4 * g, uint64_t{0}, uint64_t{0}, uint64_t{0});
  ASSERT_EQ(st, 0);
  uint64_t base = std::get<0>(va).ptr;
  auto [st2, phys] = c.call<calls::MemCreate>(2 * g, 0u, 0u, 0u);
  ASSERT_EQ(st2, 0);
  uint64_t p = std::get<0>(phys).v;
  // Forged physical handles, offsets past the allocation, ranges outside the reservation, overflow.
  EXPECT_EQ(c.call<calls::MemMap>(VaMap{base, g, 0, p + 1}).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::MemMap>(VaMap{base, 2 * g, g, p}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemMap>(VaMap{base + 3 * g, 2 * g, 0, p}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemMap>(VaMap{UINT64_MAX - g + 1, 2 * g, 0, p}).first, kInvalidValue);
  // Unmapped memory is not device memory yet.
  EXPECT_EQ(c.call<calls::MemcpyHtoD>(DevWrite{base, Blob{"x", 1}}, uint64_t{0}, 0u).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::MemMap>(VaMap{base, 2 * g, 0, p}).first, 0);
  EXPECT_EQ(c.call<calls::MemcpyHtoD>(DevWrite{base + g, Blob{"x", 1}}, uint64_t{0}, 0u).first, 0);
  EXPECT_EQ(c.call<calls::MemSetAccess>(VaMapped{base, 3 * g}, 3u).first, kInvalidValue);  // a hole
  EXPECT_EQ(c.call<calls::MemAddressFree>(VaRange{base, 2 * g}).first, kInvalidValue);     // not the whole reservation
  EXPECT_EQ(c.call<calls::MemRelease>(p).first, 0);
  EXPECT_EQ(c.call<calls::MemRelease>(p).first, kInvalidHandle);  // once
  auto [st3, view] = c.call<calls::MemGetInfo>();
  EXPECT_EQ(std::get<0>(view).total - std::get<0>(view).free, 2 * g);  // mapped: still charged
  EXPECT_EQ(c.call<calls::MemUnmap>(VaUnmap{base, 4 * g}).first, 0);
  auto [st4, view2] = c.call<calls::MemGetInfo>();
  EXPECT_EQ(std::get<0>(view2).free, std::get<0>(view2).total);
  EXPECT_EQ(c.call<calls::MemAddressFree>(VaRange{base, 4 * g}).first, 0);
  EXPECT_TRUE(h.finish().clean);
}

// A JIT option whose value the driver reads as an address (a log buffer, symbol arrays) would make the
// worker's driver touch the worker's memory at an address a client chose: refused.
TEST(Dispatcher, JitOptionsCarryOnlyNumbers) {
  Harness h;
  test::RawClient c(*h.client);
  for (uint32_t pointer_option : {3u /*INFO_LOG_BUFFER*/, 5u /*ERROR_LOG_BUFFER*/, 17u /*GLOBAL_SYMBOL_NAMES*/, 18u, 25u, 99u})
    EXPECT_EQ(c.call<calls::LinkCreate>(JitOptions{{pointer_option}, {0xdeadbeef}}).first, kInvalidValue) << pointer_option;
  EXPECT_EQ(c.call<calls::LinkCreate>(JitOptions{{7u}, {}}).first, kInvalidValue);  // sizes differ
  auto [st, link] = c.call<calls::LinkCreate>(JitOptions{{7u, 12u}, {3, 1}});
  ASSERT_EQ(st, 0);
  EXPECT_EQ(c.call<calls::LinkAddData>(uint64_t{std::get<0>(link).v + 1}, 1u, Blob{"x", 1}, std::string("x")).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::LinkDestroy>(std::get<0>(link).v).first, 0);
  EXPECT_EQ(c.call<calls::LinkComplete>(std::get<0>(link).v).first, kInvalidHandle);
  EXPECT_TRUE(h.finish().clean);
}

// The host-function channel: a peer without the token is dropped, the client with it is served, and a
// second channel is refused. (The client side runs in tests/cuda_programs/host_functions.cu.)
TEST(HostCallbacks, OnlyTheClientWithTheTokenIsServed) {
  worker::HostCallbacks callbacks;
  uint32_t port = 0;
  std::vector<uint8_t> token;
  ASSERT_EQ(callbacks.open(port, token), 0);
  ASSERT_EQ(token.size(), 16u);
  EXPECT_EQ(callbacks.open(port, token), cu::kIllegalState);
  std::string address = "127.0.0.1:" + std::to_string(port);
  std::thread client([&] {
    auto intruder = connectTcp(address);
    std::vector<uint8_t> wrong(16, 0);
    ConstBuffer w{wrong.data(), wrong.size()};
    intruder->send(std::span(&w, 1));
    std::vector<uint8_t> p;
    EXPECT_THROW(recvFrame(*intruder, p, 64), TransportError);  // dropped
    auto good = connectTcp(address);
    ConstBuffer t{token.data(), token.size()};
    good->send(std::span(&t, 1));
    FrameHeader h = recvFrame(*good, p, 64);
    EXPECT_EQ(h.msg, kMsgHostFuncDue);
    sendFrame(*good, kMsgHostFuncDue, kIsReply, h.seq, p.data(), p.size());
    h = recvFrame(*good, p, 64);  // the second one is answered with the wrong id
    uint64_t wrong_id = 999;
    sendFrame(*good, kMsgHostFuncDue, kIsReply, h.seq, &wrong_id, sizeof wrong_id);
  });
  EXPECT_TRUE(callbacks.run(41));
  EXPECT_FALSE(callbacks.run(42));  // a confused client loses its channel
  EXPECT_FALSE(callbacks.run(43));
  client.join();
}

// Captured host copies' rows on the channel: fetched and delivered exactly; a client that answers a fetch
// with the wrong number of bytes loses its channel (the replay's copy then moves nothing).
TEST(HostCallbacks, CapturedCopiesMoveExactlyTheirRows) {
  worker::HostCallbacks callbacks;
  uint32_t port = 0;
  std::vector<uint8_t> token;
  ASSERT_EQ(callbacks.open(port, token), 0);
  std::thread client([&] {
    auto c = connectTcp("127.0.0.1:" + std::to_string(port));
    ConstBuffer t{token.data(), token.size()};
    c->send(std::span(&t, 1));
    std::vector<uint8_t> p;
    FrameHeader h = recvFrame(*c, p, 64);  // a fetch of copy 7: its 5 bytes
    EXPECT_EQ(h.msg, kMsgHostRead);
    EXPECT_EQ(p.size(), 8u);
    sendFrame(*c, kMsgHostRead, kIsReply, h.seq, "abcde", 5);
    h = recvFrame(*c, p, 64);  // a delivery of copy 8: the id, then 3 bytes
    EXPECT_EQ(h.msg, kMsgHostWrite);
    EXPECT_EQ(std::string(p.begin() + 8, p.end()), "xyz");
    sendFrame(*c, kMsgHostWrite, kIsReply, h.seq, p.data(), 8);
    h = recvFrame(*c, p, 64);  // answered one byte short
    sendFrame(*c, kMsgHostRead, kIsReply, h.seq, "abcd", 4);
  });
  uint8_t rows[5] = {};
  EXPECT_TRUE(callbacks.fetch(7, rows, 5));
  EXPECT_EQ(std::string(reinterpret_cast<char*>(rows), 5), "abcde");
  EXPECT_TRUE(callbacks.deliver(8, reinterpret_cast<const uint8_t*>("xyz"), 3));
  EXPECT_FALSE(callbacks.fetch(9, rows, 5));
  EXPECT_FALSE(callbacks.run(10));  // the channel is gone
  client.join();
}

// The channel over shared memory (a client on the worker's host): refused to another host's identity; a
// peer without the token gets no segment; the client with it gets one and is served through its rings,
// host functions and captured copies alike; a second channel is refused.
TEST(HostCallbacks, SharedMemoryChannelOnlyForThisHostsClientWithTheToken) {
  worker::HostCallbacks callbacks;
  std::string name;
  std::vector<uint8_t> token;
  EXPECT_EQ(callbacks.openLocal("another-boot-id net:[1]", name, token), kNotSupported);
  ASSERT_EQ(callbacks.openLocal(shmHostIdentity(), name, token), 0);
  ASSERT_EQ(token.size(), 16u);
  EXPECT_EQ(callbacks.openLocal(shmHostIdentity(), name, token), cu::kIllegalState);
  uint32_t port = 0;
  EXPECT_EQ(callbacks.open(port, token), cu::kIllegalState);  // one channel per worker, of either kind
  std::thread client([&] {
    int pool = -1;
    int intruder = knockShm(name, std::vector<uint8_t>(16, 0));
    EXPECT_THROW(joinShm(intruder, 5000, pool, "intruder"), TransportError);  // dropped: no segment
    std::unique_ptr<Transport> c = joinShm(knockShm(name, token), 5000, pool, "client");
    EXPECT_EQ(pool, -1);  // the channel carries no page-locked pool
    std::vector<uint8_t> p;
    FrameHeader h = recvFrame(*c, p, 64);
    EXPECT_EQ(h.msg, kMsgHostFuncDue);
    sendFrame(*c, kMsgHostFuncDue, kIsReply, h.seq, p.data(), p.size());
    h = recvFrame(*c, p, 64);  // a fetch of copy 7: its 5 bytes
    EXPECT_EQ(h.msg, kMsgHostRead);
    sendFrame(*c, kMsgHostRead, kIsReply, h.seq, "abcde", 5);
  });
  EXPECT_TRUE(callbacks.run(41));
  uint8_t rows[5] = {};
  EXPECT_TRUE(callbacks.fetch(7, rows, 5));
  EXPECT_EQ(std::string(reinterpret_cast<char*>(rows), 5), "abcde");
  client.join();
  EXPECT_FALSE(callbacks.run(42));  // the client has gone: the channel ends, and the stream goes on
}

// Graph nodes belong to their graph: a node of another graph, a forged node, or a graph as its own child
// is refused; destroying a graph ends its nodes.
TEST(Dispatcher, GraphNodesBelongToTheirGraph) {
  Harness h;
  test::RawClient c(*h.client);
  auto graph = [&] { return std::get<0>(c.call<calls::GraphCreate>(0u).second).v; };
  uint64_t a = graph(), b = graph();
  auto [st, node] = c.call<calls::GraphAddEmptyNode>(a, GraphNodes{});
  ASSERT_EQ(st, 0);
  uint64_t n = std::get<0>(node).v;
  EXPECT_EQ(c.call<calls::GraphAddEmptyNode>(b, GraphNodes{{n}}).first, kInvalidValue);       // a's node in b
  EXPECT_EQ(c.call<calls::GraphAddEmptyNode>(a, GraphNodes{{n + 1}}).first, kInvalidValue);   // forged
  EXPECT_EQ(c.call<calls::GraphAddChildGraphNode>(a, GraphNodes{}, ChildGraph{a}).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::GraphDestroyNode>(b, n).first, kInvalidValue);
  auto [st2, second] = c.call<calls::GraphAddEmptyNode>(a, GraphNodes{{n}});
  ASSERT_EQ(st2, 0);
  const uint64_t m = std::get<0>(second).v;
  // Edges: as many ends as starts, each a node of the request's graph.
  EXPECT_EQ(c.call<calls::GraphRemoveDependencies>(a, GraphEdges{{{n, n}}, {{m}}}).first, kInvalidValue);  // one end short
  EXPECT_EQ(c.call<calls::GraphAddDependencies>(b, GraphEdges{{{n}}, {{m}}}).first, kInvalidValue);        // a's nodes in b
  EXPECT_EQ(c.call<calls::GraphRemoveDependencies>(a, GraphEdges{{{n}}, {{m}}}).first, 0);
  EXPECT_EQ(c.call<calls::GraphAddDependencies>(a, GraphEdges{{{n}}, {{m}}}).first, 0);
  EXPECT_EQ(c.call<calls::GraphDestroy>(a).first, 0);
  EXPECT_EQ(c.call<calls::GraphAddEmptyNode>(b, GraphNodes{{n}}).first, kInvalidValue);  // gone with its graph
  EXPECT_TRUE(h.finish().clean);
}

// Graph memory: an allocation node's address is the client's while a graph or an instantiation holds the
// node; a free node frees a graph allocation only (never plain memory or an interior pointer); nothing is
// charged until a launch, which then charges the device's graph reserve, and stops at the lease's cap.
TEST(Dispatcher, GraphAllocationsAreCheckedHeldAndChargedWhenTheyRun) {
  Harness h;
  test::RawClient c(*h.client);
  auto graph = [&] { return std::get<0>(c.call<calls::GraphCreate>(0u).second).v; };
  auto freeBytes = [&] { return std::get<0>(c.call<calls::MemGetInfo>().second).free; };
  const uint64_t g = graph(), other = graph(), free_before = freeBytes();
  EXPECT_EQ(c.call<calls::GraphAddMemAllocNode>(g, GraphNodes{}, GraphAllocBytes{0}).first, kInvalidValue);
  auto [st, out] = c.call<calls::GraphAddMemAllocNode>(g, GraphNodes{}, GraphAllocBytes{1 << 20});
  ASSERT_EQ(st, 0);
  const uint64_t node = std::get<0>(out).v, a = std::get<1>(out).ptr;
  EXPECT_EQ(freeBytes(), free_before);  // an allocation node holds nothing yet
  const uint64_t plain = std::get<0>(c.call<calls::MemAlloc>(uint64_t{64}).second).ptr;
  EXPECT_EQ(c.call<calls::GraphAddMemFreeNode>(g, GraphNodes{{node}}, GraphFreed{plain}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::GraphAddMemFreeNode>(g, GraphNodes{{node}}, GraphFreed{a + 8}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::GraphMemNodeGetParams>(other, node).first, kInvalidValue);  // g's node, named as other's
  ASSERT_EQ(c.call<calls::GraphAddMemFreeNode>(g, GraphNodes{{node}}, GraphFreed{a}).first, 0);
  EXPECT_EQ(c.call<calls::MemcpyHtoD>(DevWrite{a, Blob{"x", 1}}, uint64_t{0}, 0u).first, 0);  // the client's address
  EXPECT_EQ(c.call<calls::MemFree>(plain).first, 0);
  const uint64_t free_now = freeBytes();

  const uint64_t exec = std::get<0>(c.call<calls::GraphInstantiate>(g, uint64_t{0}).second).v;
  EXPECT_EQ(c.call<calls::GraphDestroy>(g).first, 0);  // the instantiation holds the node
  c.post<calls::GraphLaunch>(exec, uint64_t{0});
  EXPECT_EQ(c.call<calls::CtxSynchronize>().first, 0);
  EXPECT_EQ(free_now - freeBytes(), 1u << 20);  // the reserve the launch left
  EXPECT_EQ(c.call<calls::DeviceGraphMemTrim>().first, 0);
  EXPECT_EQ(freeBytes(), free_now);
  EXPECT_EQ(c.call<calls::MemcpyHtoD>(DevWrite{a, Blob{"x", 1}}, uint64_t{0}, 0u).first, 0);
  EXPECT_EQ(c.call<calls::GraphExecDestroy>(exec).first, 0);
  EXPECT_EQ(c.call<calls::MemcpyHtoD>(DevWrite{a, Blob{"x", 1}}, uint64_t{0}, 0u).first, kInvalidValue);  // no longer anyone's

  // Larger than the lease may hold: made, but its launch fails out of memory (latched until the next wait).
  auto [bst, big] = c.call<calls::GraphAddMemAllocNode>(other, GraphNodes{}, GraphAllocBytes{free_now + 1});
  ASSERT_EQ(bst, 0);
  const uint64_t big_exec = std::get<0>(c.call<calls::GraphInstantiate>(other, uint64_t{0}).second).v;
  c.post<calls::GraphLaunch>(big_exec, uint64_t{0});
  EXPECT_EQ(c.call<calls::CtxSynchronize>().first, kOutOfMemory);
  EXPECT_EQ(freeBytes(), free_now);
  EXPECT_TRUE(h.finish().clean);
}

// A stream-ordered allocation inside a capture is an allocation node of the capture's graph: its address
// is the client's while that graph is, and goes with a capture that ends invalidated.
TEST(Dispatcher, CapturedAllocationsGoWithAnInvalidatedCapture) {
  Harness h;
  test::RawClient c(*h.client);
  const uint64_t s = std::get<0>(c.call<calls::StreamCreate>(0u, 0).second).v;
  ASSERT_EQ(c.call<calls::StreamBeginCapture>(s, 0u).first, 0);
  auto [st, out] = c.call<calls::MemAllocAsync>(uint64_t{4096}, s);
  ASSERT_EQ(st, 0);
  const uint64_t a = std::get<0>(out).ptr;
  EXPECT_EQ(c.call<calls::Memset>(DevFill{a, 1, 4096}, 0u, s, 1u).first, 0);  // captured
  EXPECT_NE(c.call<calls::MemcpyHtoD>(DevWrite{a, Blob{"x", 1}}, s, 1u).first, 0);  // not capturable: invalidates
  EXPECT_NE(c.call<calls::StreamEndCapture>(s).first, 0);
  EXPECT_EQ(c.call<calls::MemcpyHtoD>(DevWrite{a, Blob{"x", 1}}, uint64_t{0}, 0u).first, kInvalidValue);  // no one's now
  EXPECT_TRUE(h.finish().clean);
}

// User objects: counts are 1..INT_MAX, nobody gives back more references than it holds (the client, or
// the graph the call names), a move takes only what the client has, and an object nobody holds is gone.
TEST(Dispatcher, UserObjectReferencesAreCountedPerHolder) {
  Harness h;
  test::RawClient c(*h.client);
  EXPECT_EQ(c.call<calls::UserObjectCreate>(uint64_t{7}, NewRefs{0}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::UserObjectCreate>(uint64_t{7}, NewRefs{0x80000000u}).first, kInvalidValue);
  auto [st, out] = c.call<calls::UserObjectCreate>(uint64_t{7}, NewRefs{2});
  ASSERT_EQ(st, 0);
  const uint64_t obj = std::get<0>(out).v;
  auto graph = [&] { return std::get<0>(c.call<calls::GraphCreate>(0u).second).v; };
  const uint64_t a = graph(), b = graph();
  EXPECT_EQ(c.call<calls::UserObjectRelease>(RefsReleased{obj + 1, 1}).first, kInvalidHandle);  // forged
  EXPECT_EQ(c.call<calls::UserObjectRelease>(RefsReleased{obj, 3}).first, kInvalidValue);       // holds 2
  EXPECT_EQ(c.call<calls::UserObjectRetain>(RefsAdded{obj, 1, 1}).first, kInvalidValue);         // a move needs a graph
  EXPECT_EQ(c.call<calls::GraphRetainUserObject>(a, RefsAdded{obj, 3, 1}).first, kInvalidValue); // moves more than it has
  EXPECT_EQ(c.call<calls::GraphRetainUserObject>(a, RefsAdded{obj, 2, 1}).first, 0);             // the client holds none now
  EXPECT_EQ(c.call<calls::UserObjectRelease>(RefsReleased{obj, 1}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::GraphReleaseUserObject>(b, RefsReleased{obj, 1}).first, kInvalidValue);  // a's, not b's
  EXPECT_EQ(c.call<calls::GraphReleaseUserObject>(a, RefsReleased{obj, 3}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::GraphRetainUserObject>(b, RefsAdded{obj, 1, 0}).first, 0);
  EXPECT_EQ(c.call<calls::GraphReleaseUserObject>(a, RefsReleased{obj, 2}).first, 0);
  EXPECT_EQ(c.call<calls::GraphDestroy>(b).first, 0);  // the last holder
  EXPECT_EQ(c.call<calls::UserObjectRetain>(RefsAdded{obj, 1, 0}).first, kInvalidHandle);  // gone
  EXPECT_TRUE(h.finish().clean);
}

// Green contexts: a split's source is the device or a green context of this worker's, its groups are
// bounded, and a green context is made of parts of one split, each named once; its streams are the worker's.
TEST(Dispatcher, GreenContextsAreMadeOfTheirSourcesParts) {
  Harness h;
  test::RawClient c(*h.client);
  using Parts = std::vector<uint32_t>;
  const uint32_t create = CU_GREEN_CTX_DEFAULT_STREAM, remainder = SmSplit::kRemainder;
  auto [st, whole] = c.call<calls::SmResourceSplit>(SmSource{0}, SmSplit{});
  ASSERT_EQ(st, 0);
  ASSERT_EQ(std::get<0>(whole).size(), 3u);  // the device's SMs, whole
  EXPECT_EQ(c.call<calls::SmResourceSplit>(SmSource{0x12345}, SmSplit{}).first, kInvalidHandle);  // forged
  EXPECT_EQ(c.call<calls::SmResourceSplit>(SmSource{0}, SmSplit{SmSplit::kMaxGroups + 1, 0, 16}).first, kInvalidValue);
  const SmSplit split{4, 0, 16};
  auto [st2, parts] = c.call<calls::SmResourceSplit>(SmSource{0}, split);
  ASSERT_EQ(st2, 0);
  const Parts& p = std::get<0>(parts);
  ASSERT_EQ(p.size(), 15u);  // four groups of 16 and the remainder
  EXPECT_EQ(p[0] * 4 + p[12], std::get<0>(whole)[0]);
  const Status bad = cu::kInvalidResourceConfiguration;
  EXPECT_EQ(c.call<calls::GreenCtxCreate>(SmSource{0}, split, Parts{0, 0}, create).first, bad);  // a part twice
  EXPECT_EQ(c.call<calls::GreenCtxCreate>(SmSource{0}, split, Parts{4}, create).first, bad);     // groups 0-3 only
  EXPECT_EQ(c.call<calls::GreenCtxCreate>(SmSource{0}, split, Parts{}, create).first, bad);
  EXPECT_EQ(c.call<calls::GreenCtxCreate>(SmSource{0}, SmSplit{}, Parts{remainder}, create).first, bad);  // whole: part 0
  auto [st3, made] = c.call<calls::GreenCtxCreate>(SmSource{0}, split, Parts{1, remainder}, create);
  ASSERT_EQ(st3, 0);
  const uint64_t green = std::get<0>(made).v;
  auto [st4, mine] = c.call<calls::SmResourceSplit>(SmSource{green}, SmSplit{});
  ASSERT_EQ(st4, 0);
  EXPECT_EQ(std::get<0>(mine)[0], p[3] + p[12]);  // group 1 and the remainder
  auto [st5, stream] = c.call<calls::GreenCtxStreamCreate>(green, uint32_t{CU_STREAM_NON_BLOCKING}, 0);
  ASSERT_EQ(st5, 0);
  EXPECT_EQ(c.call<calls::StreamSynchronize>(std::get<0>(stream).v).first, 0);
  EXPECT_EQ(c.call<calls::GreenCtxStreamCreate>(green + 1, uint32_t{CU_STREAM_NON_BLOCKING}, 0).first, kInvalidHandle);
  EXPECT_EQ(c.call<calls::GreenCtxDestroy>(green).first, 0);
  EXPECT_EQ(c.call<calls::GreenCtxDestroy>(green).first, kInvalidHandle);  // a handle ends once
  EXPECT_EQ(c.call<calls::SmResourceSplit>(SmSource{green}, SmSplit{}).first, kInvalidHandle);
  EXPECT_TRUE(h.finish().clean);
}

// A TMA descriptor's shape is checked against its rank where it enters: backends read each vector as long
// as the rank says, so a shorter one must never reach them.
TEST(Dispatcher, ATensorMapsShapeMatchesItsRank) {
  Harness h;
  test::RawClient c(*h.client);
  TensorMapShape tiled;
  tiled.rank = 2;
  tiled.dims = {64, 64};
  tiled.strides = {256};
  tiled.box = {16, 16};
  tiled.estrides = {1, 1};
  EXPECT_EQ(c.call<calls::TensorMapEncode>(tiled, 0u, 0u, 0u, 0u).first, 0);
  auto refused = [&](TensorMapShape t) { return c.call<calls::TensorMapEncode>(t, 0u, 0u, 0u, 0u).first == kInvalidValue; };
  TensorMapShape t = tiled;
  t.dims = {64};  // one dimension short
  EXPECT_TRUE(refused(t));
  t = tiled;
  t.strides = {};
  EXPECT_TRUE(refused(t));
  t = tiled;
  t.box = {16};
  EXPECT_TRUE(refused(t));
  t = tiled;
  t.rank = 6;  // past CUDA's 5, vectors to match
  t.dims.assign(6, 8), t.strides.assign(5, 8), t.box.assign(6, 8), t.estrides.assign(6, 1);
  EXPECT_TRUE(refused(t));
  t = tiled;
  t.kind = 1;  // im2col needs rank 3 or more, and corners
  EXPECT_TRUE(refused(t));
  t.rank = 3;
  t.dims = {8, 8, 8}, t.strides = {8, 64}, t.estrides = {1, 1, 1}, t.box.clear();
  EXPECT_TRUE(refused(t));  // no corners
  t.lower = {0}, t.upper = {0};
  EXPECT_EQ(c.call<calls::TensorMapEncode>(t, 0u, 0u, 0u, 0u).first, 0);
  t.kind = 2;  // no such kind
  EXPECT_TRUE(refused(t));
  EXPECT_TRUE(h.finish().clean);
}

// A capture's graph, once named (StreamCaptureState), may get nodes and edges while the capture lasts; its
// open dependencies are its nodes; and a capture that ends invalidated takes the graph with it.
TEST(Dispatcher, ACapturesNamedGraphLastsAsLongAsTheCapture) {
  Harness h;
  test::RawClient c(*h.client);
  const uint64_t s = std::get<0>(c.call<calls::StreamCreate>(0u, 0).second).v;
  ASSERT_EQ(c.call<calls::StreamBeginCapture>(s, 0u).first, 0);
  const uint64_t a = std::get<0>(c.call<calls::MemAlloc>(uint64_t{64}).second).ptr;
  c.post<calls::Memset>(DevFill{a, 1, 64}, 0u, s, 1u);
  auto [st, out] = c.call<calls::StreamCaptureState>(s);
  ASSERT_EQ(st, 0);
  const CaptureState state = std::get<0>(out);
  EXPECT_EQ(state.status, 1u);  // CU_STREAM_CAPTURE_STATUS_ACTIVE
  ASSERT_EQ(state.deps.v.size(), 1u);
  EXPECT_EQ(state.types, std::vector<uint32_t>{CU_GRAPH_NODE_TYPE_MEMSET});
  const uint64_t g = state.graph.v;
  auto [nst, node] = c.call<calls::GraphAddEmptyNode>(g, GraphNodes{state.deps.v});
  ASSERT_EQ(nst, 0);
  const uint64_t empty = std::get<0>(node).v;
  EXPECT_EQ(c.call<calls::StreamUpdateCaptureDeps>(s, g, GraphNodes{{empty}}, 1u).first, 0);
  EXPECT_EQ(c.call<calls::StreamUpdateCaptureDeps>(s, g, GraphNodes{{empty + 1}}, 1u).first, kInvalidValue);  // forged
  EXPECT_EQ(c.call<calls::StreamUpdateCaptureDeps>(s, g, GraphNodes{{empty}}, 2u).first, kInvalidValue);      // no such flag
  EXPECT_EQ(std::get<0>(c.call<calls::StreamCaptureState>(s).second).deps.v, std::vector<uint64_t>{empty});
  EXPECT_NE(c.call<calls::MemcpyHtoD>(DevWrite{a, Blob{"x", 1}}, s, 1u).first, 0);  // invalidates the capture
  EXPECT_NE(c.call<calls::StreamEndCapture>(s).first, 0);
  EXPECT_EQ(c.call<calls::GraphAddEmptyNode>(g, GraphNodes{}).first, kInvalidHandle);  // gone with its capture
  EXPECT_TRUE(h.finish().clean);
}

// A conditional handle is its graph's; a conditional node's bodies are graphs the client may fill but
// not destroy, and they end with the node or with its graph (nested bodies too). Listed and cloned nodes
// are the listing's or the clone's graph's.
TEST(Dispatcher, ConditionalBodiesBelongToTheirNode) {
  Harness h;
  test::RawClient c(*h.client);
  auto graph = [&] { return std::get<0>(c.call<calls::GraphCreate>(0u).second).v; };
  uint64_t a = graph(), b = graph();
  auto handle = [&](uint64_t g) { return std::get<0>(c.call<calls::GraphConditionalHandleCreate>(g, 0u, 0u).second).v; };
  uint64_t ha = handle(a);
  EXPECT_EQ(c.call<calls::GraphAddConditionalNode>(b, GraphNodes{}, ha, 0u, 1u).first, kInvalidValue);  // a's handle in b
  EXPECT_EQ(c.call<calls::GraphAddConditionalNode>(a, GraphNodes{}, ha + 100, 0u, 1u).first, kInvalidHandle);  // forged
  auto [st, out] = c.call<calls::GraphAddConditionalNode>(a, GraphNodes{}, ha, 1u, 1u);  // WHILE
  ASSERT_EQ(st, 0);
  uint64_t loop = std::get<0>(out).v;
  ASSERT_EQ(std::get<1>(out).v.size(), 1u);
  uint64_t body = std::get<1>(out).v[0];
  EXPECT_EQ(c.call<calls::GraphDestroy>(body).first, kInvalidValue);  // the node's, not the client's to destroy
  // A body holds a conditional node of its own: its body is nested two deep.
  uint64_t hb = handle(body);
  auto [st2, inner] = c.call<calls::GraphAddConditionalNode>(body, GraphNodes{}, hb, 0u, 1u);
  ASSERT_EQ(st2, 0);
  uint64_t nested = std::get<1>(inner).v[0];
  EXPECT_EQ(c.call<calls::GraphAddEmptyNode>(nested, GraphNodes{}).first, 0);
  auto [st3, shape] = c.call<calls::GraphTopology>(a);
  ASSERT_EQ(st3, 0);
  EXPECT_EQ(std::get<0>(shape).v, std::vector<uint64_t>{loop});
  EXPECT_EQ(std::get<1>(shape), std::vector<uint32_t>{13u});  // CU_GRAPH_NODE_TYPE_CONDITIONAL
  // Captured into, the body is handed back by StreamEndCapture and is still the node's.
  uint64_t stream = std::get<0>(c.call<calls::StreamCreate>(0u, 0).second).v;
  EXPECT_EQ(c.call<calls::StreamBeginCaptureToGraph>(stream, body, GraphNodes{}, 0u).first, 0);
  auto [st6, captured] = c.call<calls::StreamEndCapture>(stream);
  EXPECT_EQ(st6, 0);
  EXPECT_EQ(std::get<0>(captured).v, body);
  EXPECT_EQ(c.call<calls::GraphDestroy>(body).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::GraphDestroyNode>(a, loop).first, 0);
  EXPECT_EQ(c.call<calls::GraphAddEmptyNode>(body, GraphNodes{}).first, kInvalidHandle);    // gone with the node
  EXPECT_EQ(c.call<calls::GraphAddEmptyNode>(nested, GraphNodes{}).first, kInvalidHandle);  // and its nested body
  // A clone's node: found from the original's node, and the clone's alone.
  auto [st4, e] = c.call<calls::GraphAddEmptyNode>(b, GraphNodes{});
  ASSERT_EQ(st4, 0);
  uint64_t clone = std::get<0>(c.call<calls::GraphClone>(b).second).v;
  auto [st5, found] = c.call<calls::GraphNodeFindInClone>(b, std::get<0>(e).v, clone);
  ASSERT_EQ(st5, 0);
  uint64_t copy = std::get<0>(found).v;
  EXPECT_EQ(c.call<calls::GraphAddEmptyNode>(clone, GraphNodes{{copy}}).first, 0);
  EXPECT_EQ(c.call<calls::GraphAddEmptyNode>(b, GraphNodes{{copy}}).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::GraphNodeFindInClone>(a, std::get<0>(e).v, clone).first, kInvalidValue);  // not a's node
  // A child node's embedded graph is the node's too.
  auto [st7, child] = c.call<calls::GraphAddChildGraphNode>(a, GraphNodes{}, ChildGraph{b});
  ASSERT_EQ(st7, 0);
  auto [st8, embedded] = c.call<calls::GraphChildGraphNodeGetGraph>(a, std::get<0>(child).v);
  ASSERT_EQ(st8, 0);
  ASSERT_EQ(std::get<0>(embedded).v.size(), 1u);
  uint64_t inner_graph = std::get<0>(embedded).v[0];
  EXPECT_EQ(c.call<calls::GraphAddEmptyNode>(inner_graph, GraphNodes{}).first, 0);
  EXPECT_EQ(c.call<calls::GraphDestroy>(inner_graph).first, kInvalidValue);
  EXPECT_EQ(c.call<calls::GraphChildGraphNodeGetGraph>(b, std::get<0>(e).v).first, kInvalidValue);  // not a child node
  EXPECT_EQ(c.call<calls::GraphDestroy>(a).first, 0);
  EXPECT_EQ(c.call<calls::GraphAddEmptyNode>(inner_graph, GraphNodes{}).first, kInvalidHandle);  // gone with a
  EXPECT_TRUE(h.finish().clean);
}

// Launch attributes are checked where they enter: an event they name must be this worker's (the driver
// would dereference a forged one), unknown attributes are refused, and an access-policy window must lie
// in the client's memory.
TEST(Dispatcher, LaunchAttributesNameOnlyTheClientsEventsAndMemory) {
  Harness h;
  test::RawClient c(*h.client);
  uint64_t f = simFunction(c);
  ASSERT_NE(f, 0u);
  uint64_t event = std::get<0>(c.call<calls::EventCreate>(0u).second).v;
  auto launch = [&](const CUlaunchAttribute& a) {
    Blob attrs{&a, sizeof a};
    return c.call<calls::LaunchKernel>(f, 1u, 1u, 1u, 1u, 1u, 1u, 0u, uint64_t{0}, Blob{}, LaunchAttrs{attrs}).first;
  };
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
  a.value.programmaticEvent.event = reinterpret_cast<CUevent>(uint64_t{0xdead0000});
  EXPECT_EQ(launch(a), kInvalidHandle);  // forged
  a.value.programmaticEvent.event = reinterpret_cast<CUevent>(event);
  EXPECT_EQ(launch(a), 0);
  a = CUlaunchAttribute{};
  a.id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
  a.value.launchCompletionEvent.event = reinterpret_cast<CUevent>(event + 1);
  EXPECT_EQ(launch(a), kInvalidHandle);
  a = CUlaunchAttribute{};
  a.id = static_cast<CUlaunchAttributeID>(99);
  EXPECT_EQ(launch(a), kInvalidValue);  // unknown
  a = CUlaunchAttribute{};
  a.id = CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;
  a.value.accessPolicyWindow.base_ptr = reinterpret_cast<void*>(uint64_t{0x1000});
  a.value.accessPolicyWindow.num_bytes = 4096;
  EXPECT_EQ(launch(a), kInvalidValue);  // not the client's memory
  uint64_t mem = std::get<0>(c.call<calls::MemAlloc>(AllocBytes{8192}).second).ptr;
  a.value.accessPolicyWindow.base_ptr = reinterpret_cast<void*>(mem);
  EXPECT_EQ(launch(a), 0);
  a = CUlaunchAttribute{};
  a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  a.value.clusterDim.x = 1;
  a.value.clusterDim.y = a.value.clusterDim.z = 1;
  EXPECT_EQ(launch(a), 0);
  EXPECT_EQ(c.call<calls::LaunchKernel>(f, 1u, 1u, 1u, 1u, 1u, 1u, 0u, uint64_t{0}, Blob{}, LaunchAttrs{Blob{"abc", 3}}).first, kInvalidValue);
  EXPECT_TRUE(h.finish().clean);
}

// A batch memory-operation node writes and waits only on aligned words of the client's own memory, with
// known operations, a flush or barrier names no word, and the list is whole and bounded.
TEST(Dispatcher, ABatchMemOpNodeTouchesOnlyTheClientsWords) {
  Harness h;
  test::RawClient c(*h.client);
  uint64_t mem = std::get<0>(c.call<calls::MemAlloc>(AllocBytes{4096}).second).ptr;
  uint64_t g = std::get<0>(c.call<calls::GraphCreate>(0u).second).v;
  auto node = [&](MemOps m) { return c.call<calls::GraphAddBatchMemOpNode>(g, GraphNodes{}, m).first; };
  auto one = [](uint32_t op, uint64_t ptr, uint64_t value = 1) {
    MemOps m;
    m.add(op, 0, ptr, value);
    return m;
  };
  EXPECT_EQ(node(one(MemOps::kWrite32, mem + 8)), 0);
  EXPECT_EQ(node(one(MemOps::kWait64, mem + 4088)), 0);
  EXPECT_EQ(node(one(MemOps::kWrite64, mem + 4092)), kInvalidValue);        // past the allocation's end
  EXPECT_EQ(node(one(MemOps::kWrite32, mem + 2)), kInvalidValue);           // misaligned
  EXPECT_EQ(node(one(MemOps::kWrite64, 0x7f0000001000ull)), kInvalidValue);  // not the client's memory
  EXPECT_EQ(node(one(7, mem)), kInvalidValue);                               // no such operation
  EXPECT_EQ(node(one(MemOps::kBarrier, 0, 0)), 0);
  EXPECT_EQ(node(one(MemOps::kFlush, mem, 0)), kInvalidValue);  // a flush names no word
  MemOps torn = one(MemOps::kWrite32, mem);
  torn.v.pop_back();
  EXPECT_EQ(node(torn), kInvalidValue);
  EXPECT_EQ(node(MemOps{}), kInvalidValue);
  MemOps many;
  for (size_t i = 0; i <= MemOps::kMaxOps; ++i) many.add(MemOps::kWrite32, 0, mem, i);
  EXPECT_EQ(node(many), kInvalidValue);
  EXPECT_TRUE(h.finish().clean);
}

// A graph's work runs later than the calls that built it: memory freed in between is not the client's any
// more. Launching such a graph answers CUDA_ERROR_ILLEGAL_ADDRESS, as a GPU would, and the worker carries
// on (issue 11: the sim worker crashed).
TEST(Dispatcher, AGraphLaunchedAfterItsMemoryWasFreedFaultsWithoutCrashing) {
  Harness h;
  test::RawClient c(*h.client);
  const uint64_t bytes = 1 << 20;  // a memfd mapping on sim: unmapped when freed
  uint64_t mem = std::get<0>(c.call<calls::MemAlloc>(AllocBytes{bytes}).second).ptr;
  uint64_t other = std::get<0>(c.call<calls::MemAlloc>(AllocBytes{bytes}).second).ptr;
  uint64_t g = std::get<0>(c.call<calls::GraphCreate>(0u).second).v;
  auto [st, node] = c.call<calls::GraphAddMemsetNode>(g, GraphNodes{}, DevFillRect{DevRect{mem, bytes, bytes, 1}, 4}, 7u);
  ASSERT_EQ(st, 0);
  auto [st2, copy] = c.call<calls::GraphAddMemcpyNode>(g, GraphNodes{{std::get<0>(node).v}},
                                                      DevCopyRect{DevRect{other, bytes, bytes, 1}, DevRect{mem, bytes, bytes, 1}});
  ASSERT_EQ(st2, 0);
  auto [st3, exec] = c.call<calls::GraphInstantiate>(g, uint64_t{0});
  ASSERT_EQ(st3, 0);
  uint64_t e = std::get<0>(exec).v;
  EXPECT_EQ(c.call<calls::GraphLaunch>(e, uint64_t{0}).first, 0);
  EXPECT_EQ(c.call<calls::MemFree>(mem).first, 0);
  EXPECT_EQ(c.call<calls::GraphLaunch>(e, uint64_t{0}).first, 700 /*CUDA_ERROR_ILLEGAL_ADDRESS*/);
  EXPECT_EQ(c.call<calls::MemAlloc>(AllocBytes{4096}).first, 0);  // still serving
  EXPECT_TRUE(h.finish().clean);
}

// What the lease's memory count says its client uses (cuMemGetInfo's total less free).
uint64_t usedBy(test::RawClient& c) {
  auto view = std::get<0>(c.call<calls::MemGetInfo>().second);
  return view.total - view.free;
}

// Physical memory one worker exports (shareable_handles.h) another imports as physical memory of its own,
// which it maps like any; it is the exporter's lease's, so the importer's lease is charged nothing for it
// and gets nothing back when it goes; the exporter's release ends the export.
TEST(Dispatcher, ImportedPhysicalMemoryIsTheExportersLeases) {
  Harness ex, im;
  test::RawClient e(*ex.client), i(*im.client);
  const uint64_t g = 2u << 20;
  auto [st, phys] = e.call<calls::MemCreate>(2 * g, 1u /*POSIX fd*/, 0u, 0u);
  ASSERT_EQ(st, 0);
  uint64_t p = std::get<0>(phys).v;
  EXPECT_EQ(e.call<calls::MemExportShareable>(p + 1, 1u).first, kInvalidHandle);
  EXPECT_EQ(e.call<calls::MemExportShareable>(p, 2u /*Win32*/).first, kNotSupported);
  auto [st2, exported] = e.call<calls::MemExportShareable>(p, 1u);
  ASSERT_EQ(st2, 0);
  const std::vector<uint8_t> handle = std::get<0>(exported);

  auto used = [&] { return usedBy(i); };
  ASSERT_EQ(i.call<calls::MemAlloc>(uint64_t{1} << 20).first, 0);
  const uint64_t own = used();
  EXPECT_EQ(i.call<calls::MemImportShareable>(handle, 0u).first, kNotSupported);
  auto [st3, imported] = i.call<calls::MemImportShareable>(handle, 1u);
  ASSERT_EQ(st3, 0);
  const uint64_t h = std::get<0>(imported).handle.v;
  EXPECT_EQ(std::get<0>(imported).bytes, 2 * g);
  auto [st4, va] = i.call<calls::MemAddressReserve>(2 * g, uint64_t{0}, uint64_t{0}, uint64_t{0});
  ASSERT_EQ(st4, 0);
  uint64_t base = std::get<0>(va).ptr;
  EXPECT_EQ(i.call<calls::MemMap>(VaMap{base, 2 * g, 0, h}).first, 0);
  EXPECT_EQ(i.call<calls::MemcpyHtoD>(DevWrite{base + g, Blob{"x", 1}}, uint64_t{0}, 0u).first, 0);
  EXPECT_EQ(used(), own) << "imported memory is not charged to the importer";
  EXPECT_EQ(i.call<calls::MemRelease>(h).first, 0);
  EXPECT_EQ(i.call<calls::MemUnmap>(VaUnmap{base, 2 * g}).first, 0);
  EXPECT_EQ(used(), own) << "nor given back to it";

  EXPECT_EQ(e.call<calls::MemRelease>(p).first, 0);
  EXPECT_EQ(i.call<calls::MemImportShareable>(handle, 1u).first, kInvalidValue) << "released: no longer exported";
  EXPECT_TRUE(ex.finish().clean);
  EXPECT_TRUE(im.finish().clean);
}

// An exportable pool of `e`'s, a 1 MiB allocation from it, and both exported: the pool's handle and the
// allocation's export data (ptr 0 when a step failed).
struct PoolExport {
  uint64_t pool = 0, ptr = 0;
  std::vector<uint8_t> handle, data;
};
PoolExport exportPoolAllocation(test::RawClient& e) {
  PoolExport x;
  auto [st, created] = e.call<calls::MemPoolCreate>(1u /*pinned*/, 1u /*POSIX fd*/, uint64_t{0}, 0u);
  x.pool = std::get<0>(created).v;
  auto [st2, alloc] = e.call<calls::MemAllocFromPoolAsync>(uint64_t{1} << 20, x.pool, uint64_t{0});
  auto [st3, handle] = e.call<calls::MemPoolExportShareable>(x.pool, 1u);
  auto [st4, data] = e.call<calls::MemPoolExportPointer>(std::get<0>(alloc).ptr);
  if (st || st2 || st3 || st4) return x;
  x.ptr = std::get<0>(alloc).ptr;
  x.handle = std::get<0>(handle);
  x.data = std::get<0>(data);
  return x;
}

// A pool one worker exports another imports; against it, the exporter's allocations open as memory of the
// exporter's lease (the importer is charged nothing), and are freed only as what they are. Forged export
// data, another pool's, and allocating from an imported pool are refused; destroying the pool ends its export.
TEST(Dispatcher, ImportedPoolAllocationsAreTheExportersLeases) {
  Harness ex, im;
  test::RawClient e(*ex.client), i(*im.client);
  const PoolExport exported = exportPoolAllocation(e);
  ASSERT_TRUE(exported.ptr);
  const uint64_t pool = exported.pool, ptr = exported.ptr;
  EXPECT_EQ(e.call<calls::MemPoolExportPointer>(ptr + 1).first, kInvalidValue);
  EXPECT_EQ(std::get<0>(e.call<calls::MemPoolExportPointer>(ptr).second), exported.data) << "exported again: the same data";
  worker::IpcRegistry registry;
  std::vector<uint8_t> record;
  EXPECT_EQ(registry.lookup(worker::IpcRegistry::Kind::kPoolPointer, exported.data, record), 0) << "filed";

  auto used = [&] { return usedBy(i); };
  const uint64_t own = used();
  EXPECT_EQ(i.call<calls::MemPoolImportShareable>(exported.handle, 2u).first, kNotSupported);
  auto [st5, imported] = i.call<calls::MemPoolImportShareable>(exported.handle, 1u);
  ASSERT_EQ(st5, 0);
  uint64_t ipool = std::get<0>(imported).v;
  EXPECT_EQ(i.call<calls::MemPoolImportPointer>(ipool, std::vector<uint8_t>(64, 0)).first, kInvalidValue);
  auto [st6, own_pool] = i.call<calls::MemPoolCreate>(1u, 1u, uint64_t{0}, 0u);
  ASSERT_EQ(st6, 0);
  EXPECT_EQ(i.call<calls::MemPoolImportPointer>(std::get<0>(own_pool).v, exported.data).first, kInvalidValue)
      << "opened against a pool that is not the allocation's";
  EXPECT_EQ(i.call<calls::MemAllocFromPoolAsync>(uint64_t{4096}, ipool, uint64_t{0}).first, kInvalidValue);
  auto [st7, mapping] = i.call<calls::MemPoolImportPointer>(ipool, exported.data);
  ASSERT_EQ(st7, 0);
  uint64_t opened = std::get<0>(mapping).ptr;
  EXPECT_GE(std::get<0>(mapping).bytes, uint64_t{1} << 20);
  EXPECT_EQ(i.call<calls::Memset>(DevFill{opened, 1, 4096}, 7u, uint64_t{0}, 0u).first, 0) << "the client's memory now";
  EXPECT_EQ(used(), own) << "not charged to the importer";
  EXPECT_EQ(i.call<calls::MemFree>(opened).first, kInvalidValue) << "not an allocation of the importer's";
  EXPECT_EQ(i.call<calls::MemPoolFreeImported>(opened + 4096, uint64_t{0}).first, kInvalidValue);
  EXPECT_EQ(i.call<calls::MemPoolFreeImported>(opened, uint64_t{0}).first, 0);
  EXPECT_EQ(i.call<calls::Memset>(DevFill{opened, 1, 4096}, 7u, uint64_t{0}, 0u).first, kInvalidValue) << "gone once freed";
  EXPECT_EQ(used(), own);

  EXPECT_EQ(e.call<calls::MemFreeAsync>(ptr, uint64_t{0}).first, 0);
  EXPECT_EQ(registry.lookup(worker::IpcRegistry::Kind::kPoolPointer, exported.data, record), kInvalidValue)
      << "the allocation's export ends when it is freed";
  EXPECT_EQ(e.call<calls::MemPoolDestroy>(pool).first, 0);
  EXPECT_EQ(i.call<calls::MemPoolImportShareable>(exported.handle, 1u).first, kInvalidValue) << "destroyed: no longer exported";
  EXPECT_TRUE(ex.finish().clean);
  EXPECT_TRUE(im.finish().clean);
}

// Memory another process imported lives on while it holds it, also once its exporter freed it (CUDA keeps
// it): the exporter's lease stays charged for it until the importer lets go (import_holds.h). Physical
// memory from a shareable handle and a shared pool's allocation; the IPC handle's way is checked end to end
// (allocator.lease_flow).
TEST(Dispatcher, MemoryAnotherWorkerImportedStaysChargedUntilItLetsGo) {
  Harness ex, im;
  test::RawClient e(*ex.client), i(*im.client);
  auto used = [&] { return usedBy(e); };
  const uint64_t none = used(), g = 2u << 20;

  auto [st, phys] = e.call<calls::MemCreate>(2 * g, 1u /*POSIX fd*/, 0u, 0u);
  ASSERT_EQ(st, 0);
  auto [st2, exported] = e.call<calls::MemExportShareable>(std::get<0>(phys).v, 1u);
  ASSERT_EQ(st2, 0);
  auto [st3, imported] = i.call<calls::MemImportShareable>(std::get<0>(exported), 1u);
  ASSERT_EQ(st3, 0);
  auto [st4, va] = i.call<calls::MemAddressReserve>(2 * g, uint64_t{0}, uint64_t{0}, uint64_t{0});
  ASSERT_EQ(st4, 0);
  const uint64_t base = std::get<0>(va).ptr;
  EXPECT_EQ(i.call<calls::MemMap>(VaMap{base, 2 * g, 0, std::get<0>(imported).handle.v}).first, 0);
  EXPECT_EQ(e.call<calls::MemRelease>(std::get<0>(phys).v).first, 0);
  EXPECT_EQ(used(), none + 2 * g) << "released by its exporter, still held by its importer";
  EXPECT_EQ(i.call<calls::MemRelease>(std::get<0>(imported).handle.v).first, 0);
  EXPECT_EQ(used(), none + 2 * g) << "the importer released its handle but still maps the memory";
  EXPECT_EQ(i.call<calls::MemUnmap>(VaUnmap{base, 2 * g}).first, 0);
  EXPECT_EQ(used(), none) << "the importer let go";

  const PoolExport pooled = exportPoolAllocation(e);
  ASSERT_TRUE(pooled.ptr);
  const uint64_t holding = used();
  ASSERT_GT(holding, none);
  auto [st8, ipool] = i.call<calls::MemPoolImportShareable>(pooled.handle, 1u);
  ASSERT_EQ(st8, 0);
  auto [st9, mapping] = i.call<calls::MemPoolImportPointer>(std::get<0>(ipool).v, pooled.data);
  ASSERT_EQ(st9, 0);
  EXPECT_EQ(e.call<calls::MemFreeAsync>(pooled.ptr, uint64_t{0}).first, 0);
  EXPECT_EQ(used(), holding) << "freed by its exporter, still held by its importer";
  EXPECT_EQ(i.call<calls::MemPoolImportPointer>(std::get<0>(ipool).v, pooled.data).first, kInvalidValue)
      << "freed: no longer exported";
  EXPECT_EQ(i.call<calls::MemPoolFreeImported>(std::get<0>(mapping).ptr, uint64_t{0}).first, 0);
  EXPECT_EQ(used(), none) << "the importer let go";
  EXPECT_TRUE(ex.finish().clean);
  EXPECT_TRUE(im.finish().clean);
}

// Physical memory its exporter released while it still maps it, and an importer holds: counted once, until
// both the importer let go and the exporter's last mapping went, whichever comes later (it used to be
// counted twice in between: once for the mapping, once for the hold).
TEST(Dispatcher, PhysicalMemoryReleasedWhileMappedAndImportedIsCountedOnce) {
  Harness ex, im;
  test::RawClient e(*ex.client), i(*im.client);
  auto used = [&] { return usedBy(e); };
  const uint64_t none = used(), g = 2u << 20;
  for (bool importer_first : {true, false}) {
    auto [st, phys] = e.call<calls::MemCreate>(g, 1u /*POSIX fd*/, 0u, 0u);
    ASSERT_EQ(st, 0);
    const uint64_t h = std::get<0>(phys).v;
    auto [st2, va] = e.call<calls::MemAddressReserve>(g, uint64_t{0}, uint64_t{0}, uint64_t{0});
    ASSERT_EQ(st2, 0);
    const uint64_t mine = std::get<0>(va).ptr;
    ASSERT_EQ(e.call<calls::MemMap>(VaMap{mine, g, 0, h}).first, 0);
    auto [st3, exported] = e.call<calls::MemExportShareable>(h, 1u);
    ASSERT_EQ(st3, 0);
    auto [st4, imported] = i.call<calls::MemImportShareable>(std::get<0>(exported), 1u);
    ASSERT_EQ(st4, 0);
    EXPECT_EQ(e.call<calls::MemRelease>(h).first, 0);
    EXPECT_EQ(used(), none + g) << "released, still mapped by its exporter and held by its importer: counted once";
    auto importerLetsGo = [&] { EXPECT_EQ(i.call<calls::MemRelease>(std::get<0>(imported).handle.v).first, 0); };
    auto exporterUnmaps = [&] { EXPECT_EQ(e.call<calls::MemUnmap>(VaUnmap{mine, g}).first, 0); };
    if (importer_first) importerLetsGo(); else exporterUnmaps();
    EXPECT_EQ(used(), none + g) << (importer_first ? "the exporter still maps it" : "the importer still holds it");
    if (importer_first) exporterUnmaps(); else importerLetsGo();
    EXPECT_EQ(used(), none) << "both let go";
    EXPECT_EQ(e.call<calls::MemAddressFree>(VaRange{mine, g}).first, 0);
  }
  EXPECT_TRUE(ex.finish().clean);
  EXPECT_TRUE(im.finish().clean);
}

// The client learns which of the addresses it took for graph allocations it may forget: a graph allocation
// once no graph holds its node and it is not live (said once), and an allocation it asks about that is no
// graph memory (made beside a capture); a graph allocation still held is not named.
TEST(Dispatcher, GoneGraphAllocationsAreNamedOnce) {
  Harness h;
  test::RawClient c(*h.client);
  auto gone = [&](std::vector<uint64_t> asked) {
    auto [st, out] = c.call<calls::GraphAllocationsGone>(FreedAddresses{std::move(asked)});
    EXPECT_EQ(st, 0);
    auto v = std::get<0>(out).v;
    std::sort(v.begin(), v.end());
    return v;
  };
  const uint64_t g = std::get<0>(c.call<calls::GraphCreate>(0u).second).v;
  auto [st, out] = c.call<calls::GraphAddMemAllocNode>(g, GraphNodes{}, GraphAllocBytes{1 << 20});
  ASSERT_EQ(st, 0);
  const uint64_t a = std::get<1>(out).ptr;
  const uint64_t plain = std::get<0>(c.call<calls::MemAlloc>(uint64_t{64}).second).ptr;
  EXPECT_EQ(gone({a}), std::vector<uint64_t>{}) << "held by its graph";
  const uint64_t exec = std::get<0>(c.call<calls::GraphInstantiate>(g, uint64_t{0}).second).v;
  EXPECT_EQ(c.call<calls::GraphDestroy>(g).first, 0);
  EXPECT_EQ(gone({}), std::vector<uint64_t>{}) << "held by the instantiation";
  c.post<calls::GraphLaunch>(exec, uint64_t{0});  // allocates, frees nothing: live
  EXPECT_EQ(c.call<calls::GraphExecDestroy>(exec).first, 0);
  EXPECT_EQ(gone({}), std::vector<uint64_t>{}) << "live";
  c.post<calls::MemFreeAsync>(a, uint64_t{0});
  EXPECT_EQ(c.call<calls::MemFree>(plain).first, 0);
  std::vector<uint64_t> both{a, plain};
  std::sort(both.begin(), both.end());
  EXPECT_EQ(gone({plain}), both) << "freed and held by nothing; and the plain allocation asked about";
  EXPECT_EQ(gone({}), std::vector<uint64_t>{}) << "each named once";
  EXPECT_TRUE(h.finish().clean);
}

// Memory imported twice into one process may come back as the same handle from a driver: the second
// import keeps the first's mappings, so unmapping them later balances and releasing frees the entry.
TEST(HandleTable, PhysicalMemoryAddedAgainKeepsItsMappings) {
  worker::HandleTable t;
  t.addPhysical(7, 2u << 20, false);
  t.addReservation(0x100000000, 2u << 20);
  t.map(0x100000000, 2u << 20, 7);
  t.addPhysical(7, 2u << 20, false);
  ASSERT_NE(t.physical(7), nullptr);
  EXPECT_EQ(t.physical(7)->mappings, 1u);
  EXPECT_EQ(t.releasePhysical(7), 0u);  // still mapped; imported memory is charged nothing anyway
  EXPECT_EQ(t.unmap(0x100000000, 2u << 20), 0u);
  EXPECT_EQ(t.physical(7), nullptr) << "gone with its last mapping";
}

// A dispatcher serving `server` from a thread of its own, which the test stops as the revocation would.
struct StoppableWorker {
  worker::SimBackend backend{worker::SimOptions{}};
  std::optional<worker::Dispatcher> dispatcher;
  worker::ServeResult result;
  std::thread thread;
  explicit StoppableWorker(Transport& server) {
    HelloReply hello;
    backend.open(0, hello);
    dispatcher.emplace(backend, server, hello.devices.at(0).total_mem);
    thread = std::thread([this] { result = dispatcher->serve(); });
  }
  worker::ServeResult stop() {
    dispatcher->stop();
    thread.join();
    return result;
  }
  ~StoppableWorker() {
    if (thread.joinable()) stop();
  }
};

// The lease ended (revocation.h): stop, from another thread, ends serving the client, between its calls
// or before the first; a client that asked is told why (kMsgEnded), and then sees its connection end.
TEST(Dispatcher, StopEndsServingFromAnotherThreadAndSaysWhy) {
  auto [client, server] = makeLoopbackPair();
  StoppableWorker w(*server);
  test::RawClient c(*client);
  c.send(kMsgEnded, 0, {});
  EXPECT_EQ(c.call<calls::MemAlloc>(uint64_t{1024}).first, 0);
  worker::ServeResult r = w.stop();
  EXPECT_FALSE(r.clean);
  EXPECT_STREQ(r.reason.c_str(), worker::kLeaseEndedReason);
  EXPECT_EQ(r.frames, 2u);
  std::vector<uint8_t> p;
  FrameHeader fh = recvFrame(*client, p, 4096);
  EXPECT_EQ(fh.msg, kMsgEnded);
  EXPECT_EQ(fh.flags, 0u);
  std::string why;
  Reader reader(p.data(), p.size());
  ASSERT_TRUE(reader.getAll(why) && reader.atEnd());
  EXPECT_EQ(why, worker::kLeaseEndedReason);
  EXPECT_THROW(recvFrame(*client, p, 1024), TransportError);

  auto [late_client, late_server] = makeLoopbackPair();
  worker::SimBackend backend{worker::SimOptions{}};
  HelloReply hello;
  backend.open(0, hello);
  worker::Dispatcher stopped_first(backend, *late_server, hello.devices.at(0).total_mem);
  stopped_first.stop();
  EXPECT_STREQ(stopped_first.serve().reason.c_str(), worker::kLeaseEndedReason);
  EXPECT_THROW(recvFrame(*late_client, p, 1024), TransportError);  // (it did not ask: not told)
}

TEST(Dispatcher, AnEndedRequestWithAPayloadIsAViolation) {
  Harness h;
  test::RawClient c(*h.client);
  c.send(kMsgEnded, 0, {1});
  std::vector<uint8_t> p;
  EXPECT_THROW(recvFrame(*h.client, p, 1024), TransportError);
  auto r = h.finish();
  EXPECT_NE(r.reason.find("malformed Ended request"), std::string::npos) << r.reason;
}

// A client that asked why and then reads nothing (its replies fill the connection) does not keep the
// worker from stopping: the reason goes out if it can within a second, and the connection is shut down
// regardless. Were stop to wait for the send, this test would never end.
TEST(Dispatcher, StopDoesNotWaitForAClientThatReadsNothing) {
  std::string address;
  int listener = test::listenOnLoopback(address);
  auto client = connectTcp(address);
  auto server = adoptTcpSocket(::accept(listener, nullptr, nullptr));
  ::close(listener);
  StoppableWorker w(*server);
  test::RawClient c(*client);
  c.send(kMsgEnded, 0, {});
  constexpr uint64_t kBytes = 64u << 20;
  auto [st, out] = c.call<calls::MemAlloc>(kBytes);
  ASSERT_EQ(st, 0);
  for (int i = 0; i < 4; ++i)  // 256 MiB of replies nobody reads
    c.send(kMsgMemcpyDtoH, kWantsReply, [&] {
      std::vector<uint8_t> v;
      Writer(v).putAll(std::get<0>(out).ptr, kBytes, uint64_t{0});
      return v;
    }());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // (stopping sooner must work as well)
  worker::ServeResult r = w.stop();
  EXPECT_FALSE(r.clean);
  EXPECT_STREQ(r.reason.c_str(), worker::kLeaseEndedReason);
}
