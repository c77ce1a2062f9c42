// Compile-time descriptions of the forwarded calls, generated from calls.def.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "gpool/protocol/fields.h"
#include "gpool/protocol/status.h"
#include "gpool/protocol/wire.h"

namespace gpool::proto {

enum class Mode { kReply, kAsync };

template <typename... T>
struct In {
  using tuple = std::tuple<T...>;
};
template <typename... T>
struct Out {
  using tuple = std::tuple<T...>;
};

// Signature of the worker handler for a call: request fields by value, reply fields by reference.
template <typename I, typename O>
struct HandlerSig;
template <typename... I, typename... O>
struct HandlerSig<In<I...>, Out<O...>> {
  using type = Status(I..., O&...);
};

#define GPOOL_UNPAREN(...) __VA_ARGS__

namespace calls {
#define X(name, number, mode_, ins, outs)                   \
  struct name {                                             \
    static constexpr uint16_t id = number;                  \
    static constexpr Mode mode = Mode::mode_;               \
    static constexpr const char* kName = #name;             \
    using in = In<GPOOL_UNPAREN ins>;                       \
    using out = Out<GPOOL_UNPAREN outs>;                    \
    using handler = HandlerSig<in, out>::type;              \
  };
#include "gpool/protocol/calls.def"
#undef X
}  // namespace calls

// Messages outside calls.def (custom encodings, docs/protocol.md).
inline constexpr uint16_t kMsgHello = 0x0001;
inline constexpr uint16_t kMsgMemcpyDtoH = 0x0105;
// Liveness (protocol 2.2, workers with kFeatureAlive). Client to worker, no reply: payload u32 interval in
// ms. From then on, while the worker handles the client's frames it sends an empty kMsgAlive frame (flags
// 0, seq 0) at least every interval, so a client waiting on a long call can tell a busy worker from a
// stopped one. The client skips these frames wherever it reads.
inline constexpr uint16_t kMsgAlive = 0x0002;
inline constexpr uint32_t kMinAliveIntervalMs = 50, kMaxAliveIntervalMs = 60000;
// Moving to another transport (protocol 2.3, workers with kFeatureShm), right after the handshake, with
// WANTS_REPLY: payload u32 kind (kTransportShm), string the client's host identity (shmHostIdentity). Reply:
// i32 status, string a Unix socket name (abstract namespace), vector<u8> 16-byte token. docs/protocol.md,
// "Shared memory". kTransportRdma (protocol 2.4, workers with kFeatureRdma): the string is the client's UCX
// worker address; the reply's string is the worker's, its token empty. docs/protocol.md, "RDMA".
inline constexpr uint16_t kMsgSwitchTransport = 0x0003;
inline constexpr uint32_t kTransportShm = 1;
inline constexpr uint32_t kTransportRdma = 2;
// The worker's standard output (protocol 2.5, workers with kFeatureOutput): what the GPU's printf and
// assert write there, which the driver flushes at synchronization. The client asks for it once, right after
// the handshake: a frame with no payload and no reply. From then on, before each reply, the worker sends
// what was written since as frames of this number (flags 0, seq 0, payload the bytes, at most
// kMaxOutputFrame each); the client writes them to its own standard output and reads on.
inline constexpr uint16_t kMsgOutput = 0x0004;
inline constexpr uint32_t kMaxOutputFrame = 1u << 20;
// Why the worker ends the connection (protocol 2.11, workers with kFeatureEnded): the client asks once,
// right after the handshake, with a frame of this number, no payload and no reply. When the worker stops
// serving it (its lease ended at the allocator), it first sends a frame of this number (flags 0, seq 0,
// payload: string, at most kMaxEndedReason bytes), then shuts the connection down.
inline constexpr uint16_t kMsgEnded = 0x0005;
inline constexpr uint32_t kMaxEndedReason = 1024;
// On the host-function channel only: the worker says callback `seq` is due (payload: u64 id); the client
// answers with a reply frame carrying the same id once the function has returned.
inline constexpr uint16_t kMsgHostFuncDue = 0x01c2;
// Also on the host-function channel only (2.8), for a captured copy between the client's memory and the
// device (HostCopyCapture): kMsgHostRead, payload u64 copy id, asks for the client's rows, which the reply
// carries packed (exactly the copy's width × height bytes); kMsgHostWrite, payload u64 copy id then the
// rows packed, gives the client its rows, and the reply carries the id once they are written.
inline constexpr uint16_t kMsgHostRead = 0x01c4;
inline constexpr uint16_t kMsgHostWrite = 0x01c5;

namespace calls {
// Loads a module image the worker host already holds, named by its SHA-256 (32 bytes). Answered by
// the worker's module cache, not a Backend: CUDA_ERROR_NOT_FOUND (500) means "send the image".
struct ModuleLoadCached {
  static constexpr uint16_t id = 0x0149;
  static constexpr Mode mode = Mode::kReply;
  static constexpr const char* kName = "ModuleLoadCached";
  using in = In<std::string /*sha256*/, uint32_t /*kind*/>;
  using out = Out<uint64_t /*handle*/>;
};
}  // namespace calls

// Name of a message number for log lines; nullptr when unknown.
const char* messageName(uint16_t msg);

}  // namespace gpool::proto
