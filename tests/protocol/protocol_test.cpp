// Wire encoding, address parsing, handshake and the loopback transport's fault injection.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>

#include <set>
#include <thread>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/driver_settings.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/handshake.h"
#include "gpool/protocol/loopback_transport.h"
#include "gpool/protocol/module_image.h"
#include "gpool/protocol/transport.h"
#include "loopback_listener.h"

using namespace gpool::proto;

TEST(Wire, RoundTripsEveryFieldKind) {
  std::vector<uint8_t> buf;
  Writer w(buf);
  const char data[] = "payload";
  std::vector<uint32_t> layout{0, 4, 8, 8};
  w.putAll(uint64_t{0x1122334455667788}, int32_t{-5}, 1.5f, Blob{data, sizeof data}, std::string("name"), layout);
  Reader r(buf.data(), buf.size());
  uint64_t a;
  int32_t b;
  float c;
  Blob d;
  std::string e;
  std::vector<uint32_t> f;
  ASSERT_TRUE(r.getAll(a, b, c, d, e, f));
  EXPECT_TRUE(r.atEnd());
  EXPECT_EQ(a, 0x1122334455667788u);
  EXPECT_EQ(b, -5);
  EXPECT_EQ(c, 1.5f);
  ASSERT_EQ(d.size, sizeof data);
  EXPECT_EQ(std::memcmp(d.data, data, sizeof data), 0);
  EXPECT_EQ(e, "name");
  EXPECT_EQ(f, layout);
  // little endian on the wire
  EXPECT_EQ(buf[0], 0x88);
}

TEST(Wire, ReaderRejectsTruncationAndLies) {
  std::vector<uint8_t> buf;
  Writer w(buf);
  w.put(Blob{"abcd", 4});
  for (size_t cut = 0; cut < buf.size(); ++cut) {
    Reader r(buf.data(), cut);
    Blob b;
    EXPECT_FALSE(r.get(b)) << "cut at " << cut;
    EXPECT_FALSE(r.ok());
  }
  // a blob length larger than what follows
  std::vector<uint8_t> lie(8, 0xff);
  Reader r(lie.data(), lie.size());
  Blob b;
  EXPECT_FALSE(r.get(b));
  // a vector count that would overflow
  std::vector<uint8_t> vec{0xff, 0xff, 0xff, 0xff};
  Reader rv(vec.data(), vec.size());
  std::vector<uint32_t> v;
  EXPECT_FALSE(rv.get(v));
  // a string over the limit
  std::vector<uint8_t> big;
  Writer wb(big);
  wb.put(std::string(kMaxStringBytes + 1, 'x'));
  Reader rs(big.data(), big.size());
  std::string s;
  EXPECT_FALSE(rs.get(s));
  // after a failure every read fails
  uint32_t x;
  EXPECT_FALSE(rs.get(x));
}

TEST(Calls, MessageNumbersAreUniqueAndNamed) {
  std::set<uint16_t> seen{kMsgHello, kMsgMemcpyDtoH};
#define X(name, number, mode, ins, outs) EXPECT_TRUE(seen.insert(number).second) << #name;
#include "gpool/protocol/calls.def"
#undef X
  for (uint16_t id : seen) EXPECT_NE(messageName(id), nullptr) << id;
  EXPECT_EQ(messageName(0x7777), nullptr);
  EXPECT_STREQ(messageName(calls::LaunchKernel::id), "LaunchKernel");
  EXPECT_EQ(calls::LaunchKernel::mode, Mode::kAsync);
  EXPECT_EQ(calls::MemAlloc::mode, Mode::kReply);
}

TEST(Address, ParsesHostPortForms) {
  std::string host;
  uint16_t port;
  ASSERT_TRUE(parseHostPort("10.0.0.5:9000", host, port));
  EXPECT_EQ(host, "10.0.0.5");
  EXPECT_EQ(port, 9000);
  ASSERT_TRUE(parseHostPort("gpu-host", host, port));
  EXPECT_EQ(port, kDefaultPort);
  ASSERT_TRUE(parseHostPort("[::1]:7421", host, port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 7421);
  for (const char* bad : {"", ":7420", "host:", "host:70000", "host:12a", "[::1", "[::1]x"})
    EXPECT_FALSE(parseHostPort(bad, host, port)) << bad;
}

TEST(Handshake, RoundTripsAndRejectsGarbage) {
  HelloReply r;
  r.driver_version = 13000;
  r.backend = "sim";
  DeviceInfo d;
  d.name = "dev";
  d.uuid[3] = 7;
  d.total_mem = 1 << 30;
  d.attributes = {0, 1, 2, 3};
  r.devices.push_back(d);
  r.features = kFeatureModuleCache;
  auto bytes = encode(r);
  auto back = decodeHelloReply(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->devices.at(0).uuid[3], 7);
  EXPECT_EQ(back->devices.at(0).attributes, d.attributes);
  EXPECT_EQ(back->features, kFeatureModuleCache);
  bytes.pop_back();
  EXPECT_FALSE(decodeHelloReply(bytes));
  bytes.resize(bytes.size() - 3);  // a 1.0 worker's reply: no feature bits
  auto old = decodeHelloReply(bytes);
  ASSERT_TRUE(old);
  EXPECT_EQ(old->features, 0u);
  EXPECT_FALSE(decodeHelloRequest({1, 2, 3}));
  HelloRequest q;
  q.token = "t";
  auto qb = encode(q);
  auto qq = decodeHelloRequest(qb);
  ASSERT_TRUE(qq);
  EXPECT_EQ(qq->token, "t");
}

// The program's driver settings travel in its Hello (2.10): only when it has some, so a Hello without
// them is the 2.9 one byte for byte; only the settings and values the driver takes pass.
TEST(Handshake, CarriesDriverSettingsOnlyWhenThereAreSome) {
  HelloRequest plain;
  plain.token = "t";
  HelloRequest with = plain;
  with.driver_env = {"CUDA_DEVICE_MAX_CONNECTIONS=1", "CUDA_LAUNCH_BLOCKING=1"};
  auto a = encode(plain), b = encode(with);
  EXPECT_EQ(std::vector<uint8_t>(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(a.size())), a);
  auto back = decodeHelloRequest(b);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->driver_env, with.driver_env);
  EXPECT_TRUE(decodeHelloRequest(a)->driver_env.empty());
  auto truncated = b;
  truncated.pop_back();
  EXPECT_FALSE(decodeHelloRequest(truncated));
  auto empty_list = a;
  for (int i = 0; i < 4; ++i) empty_list.push_back(0);  // a count of none: not sent that way
  EXPECT_FALSE(decodeHelloRequest(empty_list));
  HelloRequest many = plain;
  many.driver_env.assign(kDriverSettings.size() + 1, "CUDA_LAUNCH_BLOCKING=1");
  EXPECT_FALSE(decodeHelloRequest(encode(many)));
}

TEST(Handshake, OnlyTheDriversOwnSettingsWithTheirValuesAreValid) {
  for (const char* ok : {"CUDA_DEVICE_MAX_CONNECTIONS=1", "CUDA_DEVICE_MAX_CONNECTIONS=32", "CUDA_LAUNCH_BLOCKING=0",
                         "CUDA_MODULE_LOADING=EAGER", "CUDA_FORCE_PTX_JIT=1", "CUDA_DISABLE_PTX_JIT=0"})
    EXPECT_TRUE(validDriverSetting(ok)) << ok;
  for (const char* bad : {"CUDA_DEVICE_MAX_CONNECTIONS=0", "CUDA_DEVICE_MAX_CONNECTIONS=33", "CUDA_DEVICE_MAX_CONNECTIONS=",
                          "CUDA_DEVICE_MAX_CONNECTIONS=1x", "CUDA_DEVICE_MAX_CONNECTIONS=-1", "CUDA_LAUNCH_BLOCKING=yes",
                          "CUDA_CACHE_PATH=/etc", "LD_PRELOAD=/tmp/x.so", "CUDA_LAUNCH_BLOCKING", "=1",
                          "CUDA_MODULE_LOADING=lazy\nLD_PRELOAD=x"})
    EXPECT_FALSE(validDriverSetting(bad)) << bad;
}

TEST(Loopback, CarriesFramesBothWays) {
  auto [a, b] = makeLoopbackPair();
  std::thread t([&] {
    std::vector<uint8_t> p;
    FrameHeader h = recvFrame(*b, p, 1024);
    sendFrame(*b, h.msg, kIsReply, h.seq, p.data(), p.size());
  });
  sendFrame(*a, 0x42, kWantsReply, 9, "ping", 4);
  std::vector<uint8_t> p;
  FrameHeader h = recvFrame(*a, p, 1024);
  t.join();
  EXPECT_EQ(h.msg, 0x42);
  EXPECT_EQ(h.seq, 9u);
  EXPECT_EQ(std::string(p.begin(), p.end()), "ping");
}

TEST(Loopback, InjectedCloseTruncatesTheStream) {
  FaultPlan f;
  f.close_after_bytes = 20;  // header (16) + 4 of 10 payload bytes
  auto [a, b] = makeLoopbackPair(f);
  EXPECT_THROW(sendFrame(*a, 1, 0, 1, "0123456789", 10), TransportError);
  std::vector<uint8_t> p;
  EXPECT_THROW(recvFrame(*b, p, 1024), TransportError);
}

TEST(Loopback, InjectedCorruptionAndOversizeAreCaught) {
  FaultPlan f;
  f.corrupt_at_byte = 3;  // top byte of the length field
  auto [a, b] = makeLoopbackPair(f);
  sendFrame(*a, 1, 0, 1, "x", 1);
  std::vector<uint8_t> p;
  EXPECT_THROW(recvFrame(*b, p, kMaxRequestPayload), ProtocolError);
}

TEST(Tcp, UnreachableServerNamesTheAddress) {
  try {
    connectTcp("127.0.0.1:1", 1000);
    FAIL() << "connected to port 1";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(connectTcp("bad address:x"), TransportError);
  EXPECT_THROW(connectTcp("127.0.0.1:0"), TransportError);
}

// A connected pair of TCP transports on loopback (client, server end).
static std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>> tcpPair() {
  std::string address;
  int listener = gpool::test::listenOnLoopback(address);
  auto client = connectTcp(address);
  auto server = adoptTcpSocket(::accept(listener, nullptr, nullptr));
  ::close(listener);
  return {std::move(client), std::move(server)};
}

// Reads are buffered: frames that arrive in one write are read out in order, whatever their sizes (a
// header, a payload larger than the buffer that is partly in it, then small ones), each byte once.
TEST(Tcp, BufferedReadsGiveEveryByteOnceInOrder) {
  auto [client, server] = tcpPair();
  std::vector<uint8_t> big(200 << 10);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + i / 251);
  sendFrame(*client, 1, 0, 1, "head", 4);
  sendFrame(*client, 2, 0, 2, big.data(), big.size());
  for (uint32_t i = 0; i < 100; ++i) sendFrame(*client, 3, 0, 3 + i, &i, sizeof i);
  std::vector<uint8_t> p;
  FrameHeader h = recvFrame(*server, p, kMaxRequestPayload);
  EXPECT_EQ(h.msg, 1);
  EXPECT_EQ(std::string(p.begin(), p.end()), "head");
  h = recvFrame(*server, p, kMaxRequestPayload);
  EXPECT_EQ(h.msg, 2);
  EXPECT_TRUE(p == big);
  for (uint32_t i = 0; i < 100; ++i) {
    h = recvFrame(*server, p, kMaxRequestPayload);
    uint32_t v = 0;
    ASSERT_EQ(p.size(), sizeof v);
    std::memcpy(&v, p.data(), sizeof v);
    EXPECT_EQ(h.seq, 3 + i);
    EXPECT_EQ(v, i);
  }
}

// A read cut short still ends in a stall, named as one mid-frame, when its start sits in the buffer.
TEST(Tcp, AReadCutShortStallsMidFrame) {
  auto [client, server] = tcpPair();
  server->setStallTimeout(200);
  FrameHeader h{8, 1, 0, 1};
  ConstBuffer part{&h, 10};
  client->send(std::span(&part, 1));  // 10 of the header's 16 bytes
  std::vector<uint8_t> p;
  try {
    recvFrame(*server, p, kMaxRequestPayload);
    FAIL() << "a frame without its payload was read";
  } catch (const TransportStalled& e) {
    EXPECT_NE(std::string(e.what()).find("mid-frame"), std::string::npos) << e.what();
  }
}

TEST(ModuleImage, SizingNeverReadsPastWhatArrived) {
  // An ELF header promising section headers far beyond the bytes received.
  std::vector<uint8_t> elf(64, 0);
  std::memcpy(elf.data(), "\x7f" "ELF", 4);
  elf[4] = 2;  // ELFCLASS64
  uint64_t shoff = 1ull << 40;
  std::memcpy(elf.data() + 0x28, &shoff, 8);
  uint16_t shentsize = 64, shnum = 3;
  std::memcpy(elf.data() + 0x3a, &shentsize, 2);
  std::memcpy(elf.data() + 0x3c, &shnum, 2);
  EXPECT_EQ(moduleImageSize(elf.data(), elf.size()), 0u);
  EXPECT_EQ(moduleImageSize(elf.data(), 10), 0u);  // shorter than the ELF header
  // A fat binary header whose size fields overflow.
  std::vector<uint8_t> fat(16, 0xff);
  uint32_t magic = kFatbinMagic;
  std::memcpy(fat.data(), &magic, 4);
  EXPECT_EQ(moduleImageSize(fat.data(), fat.size()), 0u);
  EXPECT_EQ(moduleImageSize(fat.data(), 8), 0u);
  // PTX without its NUL inside the received bytes.
  const char ptx[] = "// ptx text";
  EXPECT_EQ(moduleImageSize(ptx, 5), 0u);
  EXPECT_EQ(moduleImageSize(ptx, sizeof ptx), sizeof ptx);
  EXPECT_EQ(moduleImageSize(ptx), sizeof ptx);
}

// A fat binary of entries {kind, arch, payload bytes}: 64-byte entry headers, payloads filled with `arch`.
static std::vector<uint8_t> fatbin(std::initializer_list<std::array<uint32_t, 3>> entries) {
  std::vector<uint8_t> f(16, 0);
  uint32_t magic = kFatbinMagic;
  std::memcpy(f.data(), &magic, 4);
  f[4] = 1;
  f[6] = 16;
  for (const auto& [kind, arch, bytes] : entries) {
    size_t at = f.size();
    f.resize(at + 64 + bytes, static_cast<uint8_t>(arch));
    std::memset(f.data() + at, 0, 64);
    uint16_t k = static_cast<uint16_t>(kind);
    uint32_t hs = 64;
    uint64_t payload = bytes;
    std::memcpy(f.data() + at, &k, 2);
    std::memcpy(f.data() + at + 4, &hs, 4);
    std::memcpy(f.data() + at + 8, &payload, 8);
    std::memcpy(f.data() + at + 28, &arch, 4);
  }
  uint64_t body = f.size() - 16;
  std::memcpy(f.data() + 8, &body, 8);
  return f;
}

TEST(ModuleImage, FatBinariesAreTrimmedToTheDevicesCubin) {
  auto f = fatbin({{2, 80, 100}, {2, 90, 40}, {1, 120, 300}, {2, 100, 100}});
  auto t = fatbinForArch(f.data(), f.size(), 90);
  ASSERT_EQ(t.size(), 16u + 64 + 40);
  EXPECT_EQ(moduleImageSize(t.data(), t.size()), t.size());  // a complete, consistent fat binary
  EXPECT_EQ(t.back(), 90);
  // Nothing to trim: no cubin for the device (PTX to JIT, or code for others only), or only its own.
  EXPECT_TRUE(fatbinForArch(f.data(), f.size(), 86).empty());
  auto only = fatbin({{2, 90, 40}});
  EXPECT_TRUE(fatbinForArch(only.data(), only.size(), 90).empty());
  // Entries claiming more than the image holds: not trimmed (sent whole, the worker judges it).
  auto bad = f;
  bad[16 + 8] = 0xff;
  bad[16 + 15] = 0x7f;
  EXPECT_TRUE(fatbinForArch(bad.data(), bad.size(), 90).empty());
  EXPECT_TRUE(fatbinForArch(f.data(), 10, 90).empty());
}
