// The versioned handshake (message kMsgHello) and the device description a worker sends with it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpool/protocol/calls.h"

namespace gpool::proto {

struct HelloRequest {
  uint32_t magic = kMagic;
  uint16_t major = kVersionMajor;
  uint16_t minor = kVersionMinor;
  uint32_t device = 0;     // device ordinal on the server
  std::string token;       // lease token (empty when the server needs none)
  std::string client;      // "host pid N" for the server's log lines
  // The program's CUDA driver settings (driver_settings.h), NAME=VALUE, for the worker's driver. Sent
  // (2.10) only when there are some, so a Hello without them reads as before.
  std::vector<std::string> driver_env;
};

struct DeviceInfo {
  std::string name;
  std::array<uint8_t, 16> uuid{};
  uint64_t total_mem = 0;
  std::vector<int32_t> attributes;  // indexed by CUdevice_attribute; missing ones read as 0
};

struct HelloReply {
  Status status = 0;          // CUresult; non-zero: the connection closes after this reply
  std::string error;          // why, when status != 0
  uint16_t major = kVersionMajor;
  uint16_t minor = kVersionMinor;
  uint32_t driver_version = 0;  // what the worker's driver reports
  std::string backend;          // "cuda" or "sim"
  std::vector<DeviceInfo> devices;
  uint32_t features = 0;        // kFeature* bits (absent before protocol 1.1: none)
};

inline constexpr uint32_t kFeatureModuleCache = 1;  // ModuleLoadCached can succeed: send hashes first
inline constexpr uint32_t kFeatureAlive = 2;        // the worker answers kMsgAlive (calls.h): it can prove it runs
inline constexpr uint32_t kFeatureShm = 4;          // the worker moves a client of its host to shared memory (kMsgSwitchTransport)
inline constexpr uint32_t kFeatureRdma = 8;         // the worker can move a client to UCX (kTransportRdma): libucp loads
inline constexpr uint32_t kFeatureRdmaDevice = 16;  // the worker's host has an RDMA device (InfiniBand or RoCE)
inline constexpr uint32_t kFeatureOutput = 32;      // the worker relays its standard output (kMsgOutput, calls.h)
inline constexpr uint32_t kFeatureEnded = 64;       // the worker says why it ends the connection (kMsgEnded, calls.h)

std::vector<uint8_t> encode(const HelloRequest& h);
std::vector<uint8_t> encode(const HelloReply& h);
// Decoders return nullopt on malformed input.
std::optional<HelloRequest> decodeHelloRequest(const std::vector<uint8_t>& payload);
std::optional<HelloReply> decodeHelloReply(const std::vector<uint8_t>& payload);

inline constexpr uint32_t kMaxAttributes = 1024;
inline constexpr uint32_t kMaxDevices = 64;

}  // namespace gpool::proto
