// JIT compilation and linking through gpool: PTX loaded with cuModuleLoadDataEx (log buffers among the
// options), and linked with cuLinkCreate/AddData/AddFile/Complete into an image that is then loaded and
// launched. The kernel adds one to each element; values are checked. (On sim the PTX is not compiled:
// the test plugin runs the kernel of the same name.)
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "checks.h"
#include "run_increment.h"

namespace {

const char kPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry gpool_test_increment(.param .u64 p0, .param .u32 p1)
{
  .reg .pred %p<2>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [p0];
  ld.param.u32 %r2, [p1];
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %tid.x;
  mad.lo.s32 %r1, %r3, %r4, %r5;
  setp.ge.s32 %p1, %r1, %r2;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.s32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r6, [%rd4];
  add.s32 %r7, %r6, 1;
  st.global.u32 [%rd4], %r7;
DONE:
  ret;
}
)";

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  auto loadEx = driverEntryPoint<CUresult (*)(CUmodule*, const void*, unsigned, CUjit_option*, void**)>("cuModuleLoadDataEx");
  auto loadData = driverEntryPoint<CUresult (*)(CUmodule*, const void*)>("cuModuleLoadData");
  auto unload = driverEntryPoint<CUresult (*)(CUmodule)>("cuModuleUnload");
  auto linkCreate = driverEntryPoint<CUresult (*)(unsigned, CUjit_option*, void**, CUlinkState*)>("cuLinkCreate");
  auto addData = driverEntryPoint<CUresult (*)(CUlinkState, CUjitInputType, void*, size_t, const char*, unsigned, CUjit_option*, void**)>("cuLinkAddData");
  auto addFile = driverEntryPoint<CUresult (*)(CUlinkState, CUjitInputType, const char*, unsigned, CUjit_option*, void**)>("cuLinkAddFile");
  auto complete = driverEntryPoint<CUresult (*)(CUlinkState, void**, size_t*)>("cuLinkComplete");
  auto destroy = driverEntryPoint<CUresult (*)(CUlinkState)>("cuLinkDestroy");

  // PTX with JIT options: an info log buffer (filled with a string, never left as garbage) and a level.
  char info[1024];
  std::memset(info, 'x', sizeof info);
  CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_OPTIMIZATION_LEVEL};
  void* vals[] = {info, reinterpret_cast<void*>(sizeof info), reinterpret_cast<void*>(3)};
  CUmodule m = nullptr;
  check(loadEx(&m, kPtx, 3, opts, vals) == CUDA_SUCCESS, "cuModuleLoadDataEx of PTX with JIT options");
  check(std::memchr(info, 0, sizeof info) != nullptr, "the info log buffer holds a string");
  check(runIncrement(m, 10), "the JIT-compiled kernel adds one to each element");
  unload(m);

  // A link of PTX data, then of the same PTX from a file.
  char error[1024] = {};
  CUjit_option lopts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_TARGET_FROM_CUCONTEXT};
  void* lvals[] = {error, reinterpret_cast<void*>(sizeof error), nullptr};
  CUlinkState link = nullptr;
  check(linkCreate(3, lopts, lvals, &link) == CUDA_SUCCESS, "cuLinkCreate");
  check(addData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kPtx), sizeof kPtx, "increment.ptx", 0, nullptr, nullptr) == CUDA_SUCCESS,
        "cuLinkAddData of PTX");
  void* image = nullptr;
  size_t size = 0;
  check(complete(link, &image, &size) == CUDA_SUCCESS && image && size > 0, "cuLinkComplete gives a linked image");
  CUmodule linked = nullptr;
  check(loadData(&linked, image) == CUDA_SUCCESS, "the linked image loads");
  check(runIncrement(linked, 500), "the linked kernel adds one to each element");
  unload(linked);
  check(destroy(link) == CUDA_SUCCESS, "cuLinkDestroy");

  char path[] = "/tmp/gpool-jit-XXXXXX";
  int fd = mkstemp(path);
  check(fd >= 0 && write(fd, kPtx, sizeof kPtx - 1) == static_cast<ssize_t>(sizeof kPtx - 1), "PTX written to a file");
  close(fd);
  CUlinkState from_file = nullptr;
  check(linkCreate(0, nullptr, nullptr, &from_file) == CUDA_SUCCESS && addFile(from_file, CU_JIT_INPUT_PTX, path, 0, nullptr, nullptr) == CUDA_SUCCESS &&
            complete(from_file, &image, &size) == CUDA_SUCCESS && size > 0,
        "cuLinkAddFile of a PTX file and cuLinkComplete");
  destroy(from_file);
  unlink(path);

  // Bad input is refused, with a reason in the error log.
  CUlinkState bad = nullptr;
  check(linkCreate(3, lopts, lvals, &bad) == CUDA_SUCCESS, "cuLinkCreate for bad input");
  char junk[] = "not an image";
  check(addData(bad, CU_JIT_INPUT_CUBIN, junk, sizeof junk, "junk", 0, nullptr, nullptr) != CUDA_SUCCESS, "junk input is refused");
  check(error[0] != '\0', "the error log says why");
  destroy(bad);
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
