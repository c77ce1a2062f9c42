// Prints the devices CUDA shows this process, one line each: "DEVICE <ordinal> <UUID>", as nvidia-smi -L
// would name them; "NO DEVICE <error>" when cuInit or cuDeviceGetCount fails. Through gpool's libcuda
// (allocator.multi_gpu's CUDA_VISIBLE_DEVICES tests run it under `gpool run`). With LIST_DEVICES_HOLD_S
// set, it then stays that long with its devices, for a test to look at the servers meanwhile.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <cuda.h>

#include "gpool/protocol/gpu_uuid.h"

int main() {
  int count = 0;
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) {
    std::printf("NO DEVICE %d\n", static_cast<int>(r));
    return 0;
  }
  for (int d = 0; d < count; ++d) {
    CUuuid u;
    if (cuDeviceGetUuid(&u, d) != CUDA_SUCCESS) return 1;
    std::printf("DEVICE %d %s\n", d, gpool::proto::gpuUuidText(reinterpret_cast<const unsigned char*>(u.bytes)).c_str());
  }
  std::fflush(stdout);
  if (const char* hold = std::getenv("LIST_DEVICES_HOLD_S")) ::sleep(static_cast<unsigned>(std::atoi(hold)));
  return 0;
}
