// IPC between two processes through gpool, as PyTorch's multiprocessing shares CUDA tensors: the parent
// exports an allocation and an event, a child process (the same program, started again) opens them, reads
// what the parent wrote and writes back (opening the memory twice and closing it once leaves it open); a
// handle that claims another GPU host is refused with a reason.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "processes.h"

namespace {

const size_t kBytes = 1 << 20;

int child(const char* mem_hex, const char* event_hex) {
  CK(cudaSetDevice(0));
  cudaIpcMemHandle_t mh;
  cudaIpcEventHandle_t eh;
  unhex(mem_hex, &mh, sizeof mh);
  unhex(event_hex, &eh, sizeof eh);
  cudaIpcMemHandle_t foreign = mh;
  foreign.reserved[8] ^= 0xff;  // the host part of a gpool handle
  void* p = nullptr;
  if (throughGpool())  // a gpool handle names its GPU's host; NVIDIA's handles name none
    check(cudaIpcOpenMemHandle(&p, foreign, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess, "child: a handle from another host is refused");
  cudaGetLastError();
  CK(cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess));
  void* again = nullptr;  // the driver counts opens of one handle, and hands out the same address
  CK(cudaIpcOpenMemHandle(&again, mh, cudaIpcMemLazyEnablePeerAccess));
  check(again == p, "child: the handle opened again gives the same address");
  CK(cudaIpcCloseMemHandle(again));
  std::vector<uint8_t> got(kBytes);
  CK(cudaMemcpy(got.data(), p, kBytes, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (size_t i = 0; i < kBytes; ++i) ok &= got[i] == static_cast<uint8_t>(i * 7);
  check(ok, "child: reads what the parent wrote");
  CK(cudaMemset(p, 0x42, 4096));
  cudaEvent_t e;
  CK(cudaIpcOpenEventHandle(&e, eh));
  CK(cudaEventSynchronize(e));
  CK(cudaDeviceSynchronize());
  CK(cudaIpcCloseMemHandle(p));
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "child") return child(argv[2], argv[3]);
  CK(cudaSetDevice(0));
  uint8_t* d = nullptr;
  CK(cudaMalloc(&d, kBytes));
  std::vector<uint8_t> h(kBytes);
  for (size_t i = 0; i < kBytes; ++i) h[i] = static_cast<uint8_t>(i * 7);
  CK(cudaMemcpy(d, h.data(), kBytes, cudaMemcpyHostToDevice));
  cudaIpcMemHandle_t mh;
  CK(cudaIpcGetMemHandle(&mh, d));
  cudaEvent_t e;
  CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess));
  CK(cudaEventRecord(e, 0));
  cudaIpcEventHandle_t eh;
  CK(cudaIpcGetEventHandle(&eh, e));
  void* self = nullptr;
  check(cudaIpcOpenMemHandle(&self, mh, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess, "the exporting process cannot open its own handle");
  cudaGetLastError();

  std::string m = hex(&mh, sizeof mh), ev = hex(&eh, sizeof eh);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", argv[0], "child", m.c_str(), ev.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child process opened both handles and checked the data");
  CK(cudaMemcpy(h.data(), d, 4096, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (size_t i = 0; i < 4096; ++i) ok &= h[i] == 0x42;
  check(ok, "the parent sees what the child wrote through the shared memory");
  CK(cudaFree(d));
  CK(cudaEventDestroy(e));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
