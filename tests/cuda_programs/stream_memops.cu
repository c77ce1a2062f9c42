// Stream memory operations through gpool (cuStreamWriteValue/WaitValue 32/64 and cuStreamBatchMemOp),
// checked by value; the runtime reaches them through cudaGetDriverEntryPoint, as NCCL and PyTorch do.
// Also a stream's attributes (cudaStreamSetAttribute/GetAttribute/CopyAttributes).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "checks.h"

// A stream's attributes: set, read back, copied to another stream; an access policy window must lie in
// the program's memory.
static void attributes() {
  cudaStream_t a, b;
  CK(cudaStreamCreate(&a));
  CK(cudaStreamCreate(&b));
  void* buf = nullptr;
  CK(cudaMalloc(&buf, 1 << 20));
  cudaStreamAttrValue v{};
  v.syncPolicy = cudaSyncPolicyYield;
  CK(cudaStreamSetAttribute(a, cudaStreamAttributeSynchronizationPolicy, &v));
  v = {};
  v.accessPolicyWindow.base_ptr = buf;
  v.accessPolicyWindow.num_bytes = 1 << 20;
  v.accessPolicyWindow.hitRatio = 0.5f;
  v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  CK(cudaStreamSetAttribute(a, cudaStreamAttributeAccessPolicyWindow, &v));
  cudaStreamAttrValue got{};
  CK(cudaStreamGetAttribute(a, cudaStreamAttributeSynchronizationPolicy, &got));
  check(got.syncPolicy == cudaSyncPolicyYield, "cudaStreamGetAttribute gives back the synchronization policy set");
  CK(cudaStreamCopyAttributes(b, a));
  got = {};
  CK(cudaStreamGetAttribute(b, cudaStreamAttributeAccessPolicyWindow, &got));
  check(got.accessPolicyWindow.base_ptr == buf && got.accessPolicyWindow.num_bytes == (1 << 20) && got.accessPolicyWindow.hitRatio == 0.5f,
        "cudaStreamCopyAttributes copied the access policy window");
  v.accessPolicyWindow.num_bytes = 2 << 20;  // past the allocation
  if (throughGpool())  // gpool checks a window against the program's memory; the driver does not
    check(cudaStreamSetAttribute(a, cudaStreamAttributeAccessPolicyWindow, &v) != cudaSuccess,
          "an access policy window past the program's memory is refused");
  cudaGetLastError();
  CK(cudaStreamDestroy(a));
  CK(cudaStreamDestroy(b));
  CK(cudaFree(buf));
}

int main() {
  CK(cudaSetDevice(0));
  attributes();
  int ops64 = 0;
  CK(cudaDeviceGetAttribute(&ops64, static_cast<cudaDeviceAttr>(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS), 0));
  check(ops64 == 1, "the device reports 64-bit stream memory operations");
  auto write32 = driverEntryPoint<CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned)>("cuStreamWriteValue32");
  auto write64 = driverEntryPoint<CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned)>("cuStreamWriteValue64");
  auto wait32 = driverEntryPoint<CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned)>("cuStreamWaitValue32");
  auto wait64 = driverEntryPoint<CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned)>("cuStreamWaitValue64");
  auto batch = driverEntryPoint<CUresult (*)(CUstream, unsigned, CUstreamBatchMemOpParams*, unsigned)>("cuStreamBatchMemOp");

  uint8_t* d = nullptr;
  CK(cudaMalloc(&d, 64));
  CK(cudaMemset(d, 0, 64));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  auto at = [&](int off) { return reinterpret_cast<CUdeviceptr>(d + off); };
  check(write32(s, at(0), 0xdeadbeefu, CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS, "cuStreamWriteValue32");
  check(write64(s, at(8), 0x0123456789abcdefull, CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS, "cuStreamWriteValue64");
  check(wait32(s, at(0), 0xdeadbeefu, CU_STREAM_WAIT_VALUE_EQ) == CUDA_SUCCESS, "cuStreamWaitValue32 (EQ) on a written word");
  check(wait64(s, at(8), 0x0123456789abcdefull, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS, "cuStreamWaitValue64 (GEQ)");
  CUstreamBatchMemOpParams ops[3];
  std::memset(ops, 0, sizeof ops);
  ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[0].writeValue.address = at(16);
  ops[0].writeValue.value = 7;
  ops[1].flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
  ops[2].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  ops[2].waitValue.address = at(16);
  ops[2].waitValue.value = 4;
  ops[2].waitValue.flags = CU_STREAM_WAIT_VALUE_AND;
  // A flush of remote writes only where the device can flush them (an H200 cannot: its driver refuses the batch).
  int can_flush = 0;
  CK(cudaDeviceGetAttribute(&can_flush, static_cast<cudaDeviceAttr>(CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES), 0));
  if (!can_flush) check(batch(s, 3, ops, 0) != CUDA_SUCCESS, "cuStreamBatchMemOp with a flush is refused: the device cannot flush");
  if (!can_flush) ops[1] = ops[0];  // the write once more in its place
  check(batch(s, 3, ops, 0) == CUDA_SUCCESS, can_flush ? "cuStreamBatchMemOp: write, flush, wait" : "cuStreamBatchMemOp: write, write, wait");
  uint8_t back[24];
  CK(cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  uint32_t a = 0, c = 0;
  uint64_t b = 0;
  std::memcpy(&a, back, 4);
  std::memcpy(&b, back + 8, 8);
  std::memcpy(&c, back + 16, 4);
  check(a == 0xdeadbeefu && b == 0x0123456789abcdefull && c == 7, "the words hold what was written, in stream order");
  // Misaligned or out-of-range words are refused, at once or at the next wait.
  CUresult r = write32(s, at(2), 1, 0);
  cudaError_t later = cudaStreamSynchronize(s);
  check(r == CUDA_ERROR_INVALID_VALUE || later == cudaErrorInvalidValue, "a misaligned write is refused");
  cudaGetLastError();
  r = write32(s, at(64), 1, 0);
  later = cudaStreamSynchronize(s);
  check(r != CUDA_SUCCESS || later != cudaSuccess, "a write past the allocation is refused");
  cudaGetLastError();
  CK(cudaStreamDestroy(s));
  CK(cudaFree(d));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
