// Runtime compilation as CuPy, PyTorch's jiterator and cuDNN's runtime-compiled engines do it: NVRTC
// compiles CUDA C++ in the program's own process, and the driver (gpool's, forwarding to the worker) loads
// what it made: a cubin with cuModuleLoadData, PTX with cuModuleLoadDataEx, a cubin as a library through
// the runtime (cudaLibraryLoadData, cudaLibraryGetKernel, cudaLaunchKernel), and a template instance found
// by its lowered name. gpool_test_increment's values are checked on every backend (sim runs it by name);
// the template's only where kernels really run (GPOOL_TEST_EXPECT_COMPUTE=1).
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "checks.h"
#include "run_increment.h"

namespace {

const char kSource[] = R"(
extern "C" __global__ void gpool_test_increment(unsigned* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}
template <typename T> __global__ void scale(T* p, T factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= factor;
}
)";

struct Compiled {
  std::string image;    // a cubin, or PTX text with its terminating NUL
  std::string lowered;  // scale<float>'s name in the image
};

// NVRTC on kSource for `arch` (sm_XX gives a cubin, compute_XX PTX); stops the program with NVRTC's log
// when it fails.
Compiled compile(const std::string& arch) {
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nvrtcCreateProgram(&prog, kSource, "runtime_compile.cu", 0, nullptr, nullptr);
  if (r == NVRTC_SUCCESS) r = nvrtcAddNameExpression(prog, "scale<float>");
  const std::string gpu = "--gpu-architecture=" + arch;
  const char* options[] = {gpu.c_str(), "-std=c++17"};
  if (r == NVRTC_SUCCESS) r = nvrtcCompileProgram(prog, 2, options);
  if (r != NVRTC_SUCCESS) {
    size_t size = 0;
    std::string log;
    if (prog && nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS) {
      log.resize(size);
      nvrtcGetProgramLog(prog, log.data());
    }
    std::printf("FAIL  nvrtc for %s: %s\n%s\n", arch.c_str(), nvrtcGetErrorString(r), log.c_str());
    std::exit(1);
  }
  Compiled out;
  const char* lowered = nullptr;
  nvrtcGetLoweredName(prog, "scale<float>", &lowered);
  out.lowered = lowered ? lowered : "";
  size_t size = 0;
  const bool cubin = arch.rfind("sm_", 0) == 0;
  r = cubin ? nvrtcGetCUBINSize(prog, &size) : nvrtcGetPTXSize(prog, &size);
  out.image.resize(size);
  if (r == NVRTC_SUCCESS) r = cubin ? nvrtcGetCUBIN(prog, out.image.data()) : nvrtcGetPTX(prog, out.image.data());
  nvrtcDestroyProgram(&prog);
  if (r != NVRTC_SUCCESS || size == 0) {
    std::printf("FAIL  nvrtc output for %s: %s\n", arch.c_str(), nvrtcGetErrorString(r));
    std::exit(1);
  }
  return out;
}

// scale<float> by its lowered name: every element doubled.
void runScale(CUmodule m, const std::string& lowered) {
  auto getFunction = driverEntryPoint<CUresult (*)(CUfunction*, CUmodule, const char*)>("cuModuleGetFunction");
  CUfunction f = nullptr;
  check(!lowered.empty() && getFunction(&f, m, lowered.c_str()) == CUDA_SUCCESS, "scale<float> found by its lowered name");
  const int n = 512;
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i);
  float* d = nullptr;
  CK(cudaMalloc(&d, n * sizeof(float)));
  CK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  float factor = 2.0f;
  int count = n;
  void* args[] = {&d, &factor, &count};
  auto launch = driverEntryPoint<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                              CUstream, void**, void**)>("cuLaunchKernel");
  check(launch(f, 4, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr) == CUDA_SUCCESS, "scale<float> launched");
  CK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  bool doubled = true;
  for (int i = 0; i < n; ++i) doubled = doubled && h[i] == 2.0f * i;
  checkComputed(doubled, "scale<float> doubled every element");
}

std::string archOfDevice() {
  int major = 0, minor = 0;
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  return std::to_string(major * 10 + minor);
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  auto loadData = driverEntryPoint<CUresult (*)(CUmodule*, const void*)>("cuModuleLoadData");
  auto loadEx = driverEntryPoint<CUresult (*)(CUmodule*, const void*, unsigned, CUjit_option*, void**)>("cuModuleLoadDataEx");
  auto unload = driverEntryPoint<CUresult (*)(CUmodule)>("cuModuleUnload");
  const std::string arch = archOfDevice();  // the device's own, as CuPy and the jiterator ask for

  // A cubin for this device, loaded as a module: twice, the second time as a second module of the same image.
  const Compiled cubin = compile("sm_" + arch);
  check(cubin.image.size() > 4 && std::memcmp(cubin.image.data(), "\177ELF", 4) == 0, "nvrtc made a cubin (ELF)");
  CUmodule m = nullptr, again = nullptr;
  check(loadData(&m, cubin.image.data()) == CUDA_SUCCESS, "cuModuleLoadData of NVRTC's cubin");
  check(runIncrement(m, 7), "its gpool_test_increment adds one to each element");
  runScale(m, cubin.lowered);
  check(loadData(&again, cubin.image.data()) == CUDA_SUCCESS && again != m, "the same cubin loads again as another module");
  check(runIncrement(again, 70), "and its kernel runs too");
  unload(again);
  unload(m);

  // PTX for the device's virtual architecture, compiled by the driver at load (with an error log buffer).
  const Compiled ptx = compile("compute_" + arch);
  check(ptx.image.find(".entry gpool_test_increment") != std::string::npos, "nvrtc made PTX");
  char error[512] = {};
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {error, reinterpret_cast<void*>(sizeof error)};
  CUmodule from_ptx = nullptr;
  check(loadEx(&from_ptx, ptx.image.c_str(), 2, opts, vals) == CUDA_SUCCESS, "cuModuleLoadDataEx of NVRTC's PTX", error);
  check(runIncrement(from_ptx, 700), "the PTX's gpool_test_increment adds one to each element");
  runScale(from_ptx, ptx.lowered);
  unload(from_ptx);

  // The cubin as a library, through the runtime: its kernel launched with cudaLaunchKernel.
  cudaLibrary_t lib = nullptr;
  CK(cudaLibraryLoadData(&lib, cubin.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  cudaKernel_t kernel = nullptr;
  CK(cudaLibraryGetKernel(&kernel, lib, "gpool_test_increment"));
  unsigned* d = nullptr;
  const int n = 300;
  std::vector<unsigned> h(n, 41u);
  CK(cudaMalloc(&d, n * sizeof(unsigned)));
  CK(cudaMemcpy(d, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  int count = n;
  void* args[] = {&d, &count};
  CK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(3), dim3(128), args, 0, nullptr));
  CK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  bool ok = true;
  for (unsigned v : h) ok = ok && v == 42u;
  check(ok, "cudaLibraryLoadData of the cubin: cudaLibraryGetKernel's kernel adds one to each element");
  check(runIncrement(reinterpret_cast<CUfunction>(kernel), 9000), "and the same kernel through cuLaunchKernel");
  CK(cudaLibraryUnload(lib));

  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
