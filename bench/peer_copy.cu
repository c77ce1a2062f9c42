// Copies between the two devices of one process (issue 12), through whatever libcuda.so.1 the loader
// finds: a 256 MiB peer copy each way, the same bytes through the host (device to host, then host to
// device: what a relayed copy costs at least), and a copy within one device. With one device (natively
// on a one-GPU machine) the "peer" copies are within device 0. Run it with bench/peer.sh. Prints
// "name value unit" lines.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_timing.h"

int main() {
  constexpr size_t kBytes = 256u << 20;
  const double gb = kBytes / 1e9;
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  int other = count > 1 ? 1 : 0;
  void *a = nullptr, *a2 = nullptr, *b = nullptr;
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&a, kBytes));
  CK(cudaMalloc(&a2, kBytes));
  CK(cudaMemset(a, 1, kBytes));
  CK(cudaSetDevice(other));
  CK(cudaMalloc(&b, kBytes));
  CK(cudaMemset(b, 2, kBytes));
  std::vector<char> host(kBytes);
  CK(cudaSetDevice(0));
  std::printf("devices %d\n", count);
  std::printf("peer_256MiB_0to1 %.2f GB/s\n", gb / bestSeconds(3, [&] { CK(cudaMemcpyPeer(b, other, a, 0, kBytes)); }));
  std::printf("peer_256MiB_1to0 %.2f GB/s\n", gb / bestSeconds(3, [&] { CK(cudaMemcpyPeer(a, 0, b, other, kBytes)); }));
  std::printf("via_host_256MiB %.2f GB/s\n", gb / bestSeconds(3, [&] {
    CK(cudaMemcpy(host.data(), a, kBytes, cudaMemcpyDeviceToHost));
    CK(cudaSetDevice(other));
    CK(cudaMemcpy(b, host.data(), kBytes, cudaMemcpyHostToDevice));
    CK(cudaSetDevice(0));
  }));
  std::printf("dtod_256MiB %.2f GB/s\n", gb / bestSeconds(3, [&] { CK(cudaMemcpy(a2, a, kBytes, cudaMemcpyDeviceToDevice)); }));
  return 0;
}
