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

// On the stream's device, whichever is current.
CUresult memop(bool write, uint64_t stream, CUdeviceptr addr, uint32_t bytes, uint64_t value, unsigned flags) {
  GPOOL_CONN_OF_HANDLE(conn, stream);
  if (CUresult r = checkWord(addr, bytes)) return r;
  gpool::proto::DevWord w{addr, bytes};
  return static_cast<CUresult>(write ? conn->post<calls::StreamWriteValue>(stream, w, value, uint32_t{flags})
                                     : conn->post<calls::StreamWaitValue>(stream, w, value, uint32_t{flags}));
}

// One operation of a batch, checked as the driver checks the whole batch before any of it runs. A flush of
// remote writes only where the device can flush them (NVIDIA's driver refuses it elsewhere: an H200 cannot).
CUresult checkOp(uint64_t stream, const CUstreamBatchMemOpParams& op) {
  switch (op.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32: return checkWord(op.waitValue.address, 4);
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: return checkWord(op.waitValue.address, 8);
    case CU_STREAM_MEM_OP_WRITE_VALUE_32: return checkWord(op.writeValue.address, 4);
    case CU_STREAM_MEM_OP_WRITE_VALUE_64: return checkWord(op.writeValue.address, 8);
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
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& op = ops[i];
    CUresult r = CUDA_SUCCESS;
    switch (op.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32: r = memop(false, stream, op.waitValue.address, 4, op.waitValue.value, op.waitValue.flags); break;
      case CU_STREAM_MEM_OP_WAIT_VALUE_64: r = memop(false, stream, op.waitValue.address, 8, op.waitValue.value64, op.waitValue.flags); break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32: r = memop(true, stream, op.writeValue.address, 4, op.writeValue.value, op.writeValue.flags); break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64: r = memop(true, stream, op.writeValue.address, 8, op.writeValue.value64, op.writeValue.flags); break;
      default: break;  // flushes and barriers order nothing more than the worker's in-order stream already does
    }
    if (r != CUDA_SUCCESS) return r;
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
