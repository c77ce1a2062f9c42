// The server goes away mid-run: CUDA calls must fail with a CUDA error, not kill the program.
// Protocol with tests/cuda_programs/server_loss.sh: prints READY, waits until the file named by argv[1]
// exists (the script kills gpool-server and its workers first), then keeps calling CUDA.
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* d = nullptr;
  if (cudaMalloc(&d, 1 << 20) != cudaSuccess) return 3;
  std::printf("READY\n");
  std::fflush(stdout);
  while (access(argv[1], F_OK) != 0) usleep(20000);
  std::vector<char> h(1 << 20, 1);
  cudaError_t e1 = cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice);
  cudaError_t e2 = cudaDeviceSynchronize();
  cudaError_t e3 = cudaMalloc(&d, 16);
  std::printf("after loss: memcpy=%s synchronize=%s malloc=%s\n", cudaGetErrorName(e1), cudaGetErrorName(e2), cudaGetErrorName(e3));
  bool ok = e1 != cudaSuccess && e2 != cudaSuccess && e3 != cudaSuccess;
  std::printf("%s  CUDA calls fail after the server is gone, and the program is still running\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
