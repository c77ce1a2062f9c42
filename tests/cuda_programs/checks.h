// What the CUDA test programs share: one PASS/FAIL line per check, a failure count for the exit status,
// and macros that stop the program at a call that fails (naming the call and its error).
#pragma once

#include <cuda_runtime.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

static int failures = 0;

// Each line is written at once: a program that crashes still shows how far it got.
static void check(bool ok, const char* what, const char* detail = "") {
  std::printf("%s  %s%s%s\n", ok ? "PASS" : "FAIL", what, *detail ? ": " : "", detail);
  std::fflush(stdout);
  if (!ok) ++failures;
}

// One PASS/FAIL line whose text is formatted.
#define CHECK(ok, ...)                               \
  do {                                               \
    bool ok_ = (ok);                                 \
    char what_[256];                                 \
    std::snprintf(what_, sizeof what_, __VA_ARGS__); \
    check(ok_, what_);                               \
  } while (0)

// A check of what kernels computed: a PASS/FAIL line where kernels really run (GPOOL_TEST_EXPECT_COMPUTE=1:
// natively, or through gpool on a GPU), else a SKIP line that says why (on sim they are recorded, not computed).
static void checkComputed(bool ok, const char* what) {
  static const bool computed = [] {
    const char* e = std::getenv("GPOOL_TEST_EXPECT_COMPUTE");
    return e && e[0] == '1' && e[1] == '\0';
  }();
  if (computed) check(ok, what);
  else std::printf("SKIP  %s: kernels are recorded, not computed, on this backend\n", what);
}

// Whether this process's CUDA driver is gpool's client library. Checks that gpool refuses what NVIDIA's
// driver lets a program do to itself (a copy past its allocation, which crashed the memory_2d program
// natively on an H200) run only through gpool: natively their line is absent, and nothing is compared.
static bool throughGpool() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return driver && dlsym(driver, "gpool_client_library") != nullptr;
}

// Stops the program when `call` does not return `success`; `describe(status)` names the error.
#define CHECK_STATUS(call, success, describe)                                                       \
  do {                                                                                              \
    auto s_ = (call);                                                                               \
    if (s_ != (success)) {                                                                          \
      std::printf("FAIL  %s: %s (%d)\n", #call, describe(s_), static_cast<int>(s_));              \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

// The runtime's errors print with their name too (cudaErrorNoDevice), which tests look for.
#define CK(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("FAIL  %s: %s (%s)\n", #call, cudaGetErrorString(e_), cudaGetErrorName(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

// A driver entry point through the runtime, for programs that do not link libcuda; `version` picks the
// ABI variant as cuGetProcAddress does.
template <typename F>
F driverEntryPoint(const char* name, unsigned version = 12000) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &q));
  return reinterpret_cast<F>(p);
}
