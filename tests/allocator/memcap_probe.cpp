// Run through gpool with a lease's memory cap: checks cuMemGetInfo reports the cap as total and that
// allocations past it fail with CUDA_ERROR_OUT_OF_MEMORY. usage: memcap_probe CAP_BYTES
// Or, to see the cap hold across a lease's processes: memcap_probe hold BYTES GO_FILE allocates BYTES,
// prints "HELD <free bytes>" or "OOM <free bytes>", and keeps it until GO_FILE exists.
// Or, to share memory between a lease's processes: memcap_probe commands reads one command a line from
// its input and answers each on a line: "alloc BYTES" (OK or OOM), "free", "export" (the allocation's IPC
// handle, in hex), "open HEX" (OK or ERROR <CUresult>), "close". One allocation and one opened handle at a time.
#include <dlfcn.h>
#include <unistd.h>

#include <string>

#include <cstdio>
#include <cstdlib>

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "../cuda_programs/hex.h"

namespace {

struct Driver {
  decltype(&cuMemAlloc_v2) alloc;
  decltype(&cuMemFree_v2) release;
  decltype(&cuIpcGetMemHandle) exportMem;
  decltype(&cuIpcOpenMemHandle_v2) open;
  decltype(&cuIpcCloseMemHandle) close;
};

int commands(const Driver& d) {
  CUdeviceptr mine = 0, opened = 0;
  std::string line;
  char buf[512];
  while (std::fgets(buf, sizeof buf, stdin)) {
    line = buf;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    CUresult r = CUDA_SUCCESS;
    std::string answer;
    if (line.rfind("alloc ", 0) == 0) {
      r = d.alloc(&mine, std::strtoull(line.c_str() + 6, nullptr, 10));
      answer = r == CUDA_SUCCESS ? "OK" : r == CUDA_ERROR_OUT_OF_MEMORY ? "OOM" : "";
    } else if (line == "free") {
      r = d.release(mine);
      answer = r == CUDA_SUCCESS ? "OK" : "";
    } else if (line == "export") {
      CUipcMemHandle h;
      r = d.exportMem(&h, mine);
      answer = r == CUDA_SUCCESS ? hex(&h, sizeof h) : "";
    } else if (line.rfind("open ", 0) == 0 && line.size() == 5 + 2 * sizeof(CUipcMemHandle)) {
      CUipcMemHandle h;
      unhex(line.substr(5), &h, sizeof h);
      r = d.open(&opened, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      answer = r == CUDA_SUCCESS ? "OK" : "";
    } else if (line == "close") {
      r = d.close(opened);
      answer = r == CUDA_SUCCESS ? "OK" : "";
    } else {
      answer = "UNKNOWN";
    }
    if (answer.empty()) answer = "ERROR " + std::to_string(r);
    std::printf("%s\n", answer.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool serve = argc == 2 && std::string(argv[1]) == "commands";
  bool hold = argc == 4 && std::string(argv[1]) == "hold";
  if (argc != 2 && !hold) return 2;
  size_t cap = serve ? 0 : std::strtoull(argv[hold ? 2 : 1], nullptr, 10);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) return 2;
  auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(lib, "cuInit"));
  auto retain = reinterpret_cast<decltype(&cuDevicePrimaryCtxRetain)>(dlsym(lib, "cuDevicePrimaryCtxRetain"));
  auto set = reinterpret_cast<decltype(&cuCtxSetCurrent)>(dlsym(lib, "cuCtxSetCurrent"));
  auto info = reinterpret_cast<decltype(&cuMemGetInfo_v2)>(dlsym(lib, "cuMemGetInfo_v2"));
  auto alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(dlsym(lib, "cuMemAlloc_v2"));
  auto release = reinterpret_cast<decltype(&cuMemFree_v2)>(dlsym(lib, "cuMemFree_v2"));
  if (CUresult r = init(0); r != CUDA_SUCCESS) {
    std::printf("FAIL  cuInit: %d\n", r);
    return 1;
  }
  CUcontext ctx;
  retain(&ctx, 0);
  set(ctx);
  if (serve)
    return commands(Driver{alloc, release, reinterpret_cast<decltype(&cuIpcGetMemHandle)>(dlsym(lib, "cuIpcGetMemHandle")),
                           reinterpret_cast<decltype(&cuIpcOpenMemHandle_v2)>(dlsym(lib, "cuIpcOpenMemHandle_v2")),
                           reinterpret_cast<decltype(&cuIpcCloseMemHandle)>(dlsym(lib, "cuIpcCloseMemHandle"))});
  size_t free_b = 0, total = 0;
  if (hold) {
    CUdeviceptr p = 0;
    CUresult r = alloc(&p, cap);
    info(&free_b, &total);
    std::printf("%s %zu\n", r == CUDA_SUCCESS ? "HELD" : r == CUDA_ERROR_OUT_OF_MEMORY ? "OOM" : "ERROR", free_b);
    std::fflush(stdout);
    while (access(argv[3], F_OK) != 0) usleep(20000);
    return 0;
  }
  info(&free_b, &total);
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    std::printf("%s  %s\n", ok ? "PASS" : "FAIL", what);
    failures += !ok;
  };
  check(total == cap, "cuMemGetInfo reports the lease's cap as total");
  CUdeviceptr a = 0, b = 0, c = 0;
  check(alloc(&a, cap + 1) == CUDA_ERROR_OUT_OF_MEMORY, "one allocation past the cap: CUDA_ERROR_OUT_OF_MEMORY");
  check(alloc(&b, cap / 2) == CUDA_SUCCESS, "half the cap");
  check(alloc(&c, cap / 2 + 4096) == CUDA_ERROR_OUT_OF_MEMORY, "the other half and a page more: CUDA_ERROR_OUT_OF_MEMORY");
  release(b);
  check(alloc(&c, cap / 2 + 4096) == CUDA_SUCCESS, "after a free, it fits");
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "ALL PASSED", failures);
  return failures ? 1 : 0;
}
