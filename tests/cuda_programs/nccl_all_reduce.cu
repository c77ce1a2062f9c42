// NCCL between the two devices of a lease (`gpool run -n 2`): one all-reduce, values checked. Through gpool
// NCCL cannot work (docs/user.md, "Several GPUs"): its set-up must fail at once, with gpool's line on
// stderr saying why, and the program must go on (no crash, no hang). Prints what happened; exits 0 when
// the set-up failed cleanly or the all-reduce was right, 1 otherwise.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <vector>

#include "checks.h"

int main() {
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  if (count < 2) {
    std::printf("FAIL  needs two devices, has %d\n", count);
    return 1;
  }
  ncclComm_t comms[2];
  int devs[2] = {0, 1};
  ncclResult_t r = ncclCommInitAll(comms, 2, devs);
  if (r != ncclSuccess) {
    std::printf("ncclCommInitAll failed: %s\n", ncclGetErrorString(r));
    CK(cudaSetDevice(1));  // CUDA still works after NCCL gave up
    void* p = nullptr;
    CK(cudaMalloc(&p, 1024));
    CK(cudaFree(p));
    std::printf("CUDA works after NCCL's failure\n");
    return 0;
  }
  constexpr int kN = 1024;
  float* buf[2];
  cudaStream_t s[2];
  std::vector<float> h(kN);
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&buf[d], kN * sizeof(float)));
    CK(cudaStreamCreate(&s[d]));
    for (auto& x : h) x = static_cast<float>(d + 1);
    CK(cudaMemcpy(buf[d], h.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
  }
  ncclGroupStart();
  for (int d = 0; d < 2; ++d) ncclAllReduce(buf[d], buf[d], kN, ncclFloat, ncclSum, comms[d], s[d]);
  r = ncclGroupEnd();
  bool ok = r == ncclSuccess;
  for (int d = 0; d < 2 && ok; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaStreamSynchronize(s[d]));
    CK(cudaMemcpy(h.data(), buf[d], kN * sizeof(float), cudaMemcpyDeviceToHost));
    for (float x : h) ok = ok && x == 3.0f;
  }
  std::printf("%s  NCCL all-reduce over two devices\n", ok ? "PASS" : "FAIL");
  for (int d = 0; d < 2; ++d) ncclCommDestroy(comms[d]);
  return ok ? 0 : 1;
}
