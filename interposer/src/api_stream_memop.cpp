// Stream memory operations: waits on and writes of a 32- or 64-bit word of device memory, in stream order.
// cuStreamBatchMemOp is sent as its operations one after another on the same stream (its flush and
// barrier operations order nothing more than the worker's in-order stream already does).
#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

// A word a stream memory operation may touch: aligned to its size, and not the client's host memory.
CUresult checkWord(CUdeviceptr addr, uint32_t bytes) {
  if (addr % bytes != 0) return CUDA_ERROR_INVALID_VALUE;  // as the driver says it, at once
  uint64_t base;
  Allocation a;
  if (State::get().findAllocation(addr, base, a) && !a.device) {
    GPOOL_LOG(Level::kWarn, "a stream memory operation on client host memory (%p) is not supported by gpool: the GPU "
              "cannot see this machine's memory; use device memory", reinterpret_cast<void*>(addr));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

// A wait on or a write of a checked word, to the worker of the stream's device.
CUresult post(Connection* conn, bool write, uint64_t stream, CUdeviceptr addr, uint32_t bytes, uint64_t value, unsigned flags) {
  gpool::proto::DevWord w{addr, bytes};
  return static_cast<CUresult>(write ? conn->post<calls::StreamWriteValue>(stream, w, value, uint32_t{flags})
                                     : conn->post<calls::StreamWaitValue>(stream, w, value, uint32_t{flags}));
}

// On the stream's device, whichever is current.
CUresult memop(bool write, uint64_t stream, CUdeviceptr addr, uint32_t bytes, uint64_t value, unsigned flags) {
  GPOOL_CONN_OF_HANDLE(conn, stream);
  if (CUresult r = checkWord(addr, bytes)) return r;
  return post(conn, write, stream, addr, bytes, value, flags);
}

// A batch operation on a word (flushes and barriers have none).
struct WordOp {
  bool write;
  CUdeviceptr addr;
  uint32_t bytes;
  uint64_t value;
  unsigned flags;
};
bool wordOf(const CUstreamBatchMemOpParams& op, WordOp& w) {
  switch (op.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32: w = {false, op.waitValue.address, 4, op.waitValue.value, op.waitValue.flags}; return true;
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: w = {false, op.waitValue.address, 8, op.waitValue.value64, op.waitValue.flags}; return true;
    case CU_STREAM_MEM_OP_WRITE_VALUE_32: w = {true, op.writeValue.address, 4, op.writeValue.value, op.writeValue.flags}; return true;
    case CU_STREAM_MEM_OP_WRITE_VALUE_64: w = {true, op.writeValue.address, 8, op.writeValue.value64, op.writeValue.flags}; return true;
    default: return false;
  }
}

// One operation of a batch, checked as the driver checks the whole batch before any of it runs. A flush of
// remote writes only where the device can flush them (NVIDIA's driver refuses it elsewhere: an H200 cannot).
CUresult checkOp(uint64_t stream, const CUstreamBatchMemOpParams& op) {
  if (WordOp w; wordOf(op, w)) return checkWord(w.addr, w.bytes);
  switch (op.operation) {
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      return State::get().attribute(State::get().deviceOfHandle(stream), CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES)
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_NOT_SUPPORTED;
    case CU_STREAM_MEM_OP_BARRIER: return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult batch(uint64_t stream, unsigned count, const CUstreamBatchMemOpParams* ops, unsigned flags) {
  if (flags != 0 || (count && !ops)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i)
    if (CUresult r = checkOp(stream, ops[i])) return r;
  // Each word's operation in order; flushes and barriers order nothing more than the worker's in-order
  // stream already does.
  for (unsigned i = 0; i < count; ++i) {
    WordOp w;
    if (!wordOf(ops[i], w)) continue;
    GPOOL_CONN_OF_HANDLE(conn, stream);
    if (CUresult r = post(conn, w.write, stream, w.addr, w.bytes, w.value, w.flags)) return r;
  }
  return CUDA_SUCCESS;
}

}  // namespace

// Each operation under its v1 and v2 names (same ABI), each with its per-thread-stream variant.
#define GPOOL_MEMOP(name, write, bits, type)                                                                   \
  GPOOL_EXPORT CUresult name(CUstream s, CUdeviceptr addr, type v, unsigned flags) {                           \
    GPOOL_TRY return memop(write, streamArg(s, false), addr, bits / 8, v, flags); GPOOL_CATCH                   \
  }                                                                                                            \
  GPOOL_EXPORT CUresult name##_ptsz(CUstream s, CUdeviceptr addr, type v, unsigned flags) {                    \
    GPOOL_TRY return memop(write, streamArg(s, true), addr, bits / 8, v, flags); GPOOL_CATCH                    \
  }                                                                                                            \
  GPOOL_EXPORT CUresult name##_v2(CUstream s, CUdeviceptr addr, type v, unsigned flags) {                      \
    GPOOL_TRY return memop(write, streamArg(s, false), addr, bits / 8, v, flags); GPOOL_CATCH                   \
  }                                                                                                            \
  GPOOL_EXPORT CUresult name##_v2_ptsz(CUstream s, CUdeviceptr addr, type v, unsigned flags) {                 \
    GPOOL_TRY return memop(write, streamArg(s, true), addr, bits / 8, v, flags); GPOOL_CATCH                    \
  }
GPOOL_MEMOP(cuStreamWaitValue32, false, 32, cuuint32_t)
GPOOL_MEMOP(cuStreamWaitValue64, false, 64, cuuint64_t)
GPOOL_MEMOP(cuStreamWriteValue32, true, 32, cuuint32_t)
GPOOL_MEMOP(cuStreamWriteValue64, true, 64, cuuint64_t)

GPOOL_EXPORT CUresult cuStreamBatchMemOp(CUstream s, unsigned n, CUstreamBatchMemOpParams* ops, unsigned flags) {
  GPOOL_TRY return batch(streamArg(s, false), n, ops, flags); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamBatchMemOp_ptsz(CUstream s, unsigned n, CUstreamBatchMemOpParams* ops, unsigned flags) {
  GPOOL_TRY return batch(streamArg(s, true), n, ops, flags); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned n, CUstreamBatchMemOpParams* ops, unsigned flags) {
  GPOOL_TRY return batch(streamArg(s, false), n, ops, flags); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned n, CUstreamBatchMemOpParams* ops, unsigned flags) {
  GPOOL_TRY return batch(streamArg(s, true), n, ops, flags); GPOOL_CATCH
}
