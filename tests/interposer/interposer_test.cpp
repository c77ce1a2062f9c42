// The client library as a program sees it through dlopen: symbol resolution, private tables, the
// integrity answer's building block, and behaviour with no server.
#include <dlfcn.h>
#include <gtest/gtest.h>

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "address_space.h"
#include "md2.h"

namespace {

void* lib() {
  static void* h = [] {
    setenv("GPOOL_SERVER", "127.0.0.1:1", 1);  // nothing listens there
    void* l = dlopen(GPOOL_CLIENT_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!l) ADD_FAILURE() << dlerror();
    return l;
  }();
  return h;
}

template <typename F>
F sym(const char* name) {
  return reinterpret_cast<F>(dlsym(lib(), name));
}

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

void* resolve(const char* name, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* q, CUresult* r = nullptr) {
  void* p = nullptr;
  CUresult res = sym<GetProc>("cuGetProcAddress_v2")(name, &p, version, flags, q);
  if (r) *r = res;
  return p;
}

}  // namespace

TEST(ProcAddress, PicksTheNewestVariantAtOrBelowTheVersion) {
  CUdriverProcAddressQueryResult q;
  EXPECT_EQ(resolve("cuMemAlloc", 13000, 0, &q), dlsym(lib(), "cuMemAlloc_v2"));
  EXPECT_EQ(q, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(resolve("cuMemAlloc", 3020, 0, &q), dlsym(lib(), "cuMemAlloc_v2"));
  EXPECT_EQ(resolve("cuMemAlloc", 3010, 0, &q), dlsym(lib(), "cuMemAlloc"));
  EXPECT_EQ(resolve("cuCtxCreate", 12040, 0, &q), dlsym(lib(), "cuCtxCreate_v3"));
  EXPECT_EQ(resolve("cuCtxCreate", 12050, 0, &q), dlsym(lib(), "cuCtxCreate_v4"));
  EXPECT_EQ(resolve("cuGetProcAddress", 12000, 0, &q), dlsym(lib(), "cuGetProcAddress_v2"));
}

TEST(ProcAddress, PerThreadFlagSelectsPtdsVariants) {
  CUdriverProcAddressQueryResult q;
  auto pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  EXPECT_EQ(resolve("cuMemcpyHtoDAsync", 13000, pt, &q), dlsym(lib(), "cuMemcpyHtoDAsync_v2_ptsz"));
  EXPECT_EQ(resolve("cuMemcpyHtoDAsync", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q), dlsym(lib(), "cuMemcpyHtoDAsync_v2"));
  EXPECT_EQ(resolve("cuLaunchKernel", 13000, pt, &q), dlsym(lib(), "cuLaunchKernel_ptsz"));
  EXPECT_EQ(resolve("cuMemcpyHtoD", 13000, pt, &q), dlsym(lib(), "cuMemcpyHtoD_v2_ptds"));
  // no per-thread variant: the plain one
  EXPECT_EQ(resolve("cuMemAlloc", 13000, pt, &q), dlsym(lib(), "cuMemAlloc_v2"));
}

TEST(ProcAddress, ReportsMissingSymbolsAndVersions) {
  CUdriverProcAddressQueryResult q;
  CUresult r;
  EXPECT_EQ(resolve("cuNoSuchFunction", 13000, 0, &q, &r), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(q, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(resolve("cuLaunchKernelEx", 11000, 0, &q, &r), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(q, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  // the 4-argument form
  void* p = nullptr;
  auto v1 = sym<CUresult (*)(const char*, void**, int, cuuint64_t)>("cuGetProcAddress");
  EXPECT_EQ(v1("cuInit", &p, 13000, 0), CUDA_SUCCESS);
  EXPECT_EQ(p, dlsym(lib(), "cuInit"));
}

TEST(ProcAddress, UnimplementedFunctionsAreStubsThatSayNotSupported) {
  CUdriverProcAddressQueryResult q;
  auto f = reinterpret_cast<CUresult (*)(CUtexref*)>(resolve("cuTexRefCreate", 13000, 0, &q));  // texture references: not forwarded
  ASSERT_NE(f, nullptr);
  testing::internal::CaptureStderr();
  EXPECT_EQ(f(nullptr), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(f(nullptr), CUDA_ERROR_NOT_SUPPORTED);
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("cuTexRefCreate is not supported by gpool: texture and surface references"), std::string::npos)
      << "named once with its reason (interposer/refusals.py): " << said;
  EXPECT_EQ(said.find("cuTexRefCreate", said.find("cuTexRefCreate") + 1), std::string::npos) << "once: " << said;
}

TEST(ExportTables, RequiredTablesExistAndUnknownAreRefused) {
  auto get = sym<CUresult (*)(const void**, const CUuuid*)>("cuGetExportTable");
  const uint8_t runtime[16] = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
  const uint8_t integrity[16] = {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2};
  CUuuid id;
  const void* table = nullptr;
  std::memcpy(id.bytes, runtime, 16);
  ASSERT_EQ(get(&table, &id), CUDA_SUCCESS);
  EXPECT_EQ(static_cast<const uintptr_t*>(table)[0], 13 * sizeof(void*));
  std::memcpy(id.bytes, integrity, 16);
  ASSERT_EQ(get(&table, &id), CUDA_SUCCESS);
  auto check = reinterpret_cast<CUresult (*)(unsigned, uint64_t, uint64_t*)>(static_cast<void* const*>(table)[1]);
  uint64_t out[2];
  ASSERT_EQ(check(13000, 1, out), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 0x3341181c03cb675cull);
  ASSERT_EQ(check(13001, 1, out), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 0x1841181c03cb675cull);
  EXPECT_EQ(out[1], 0x8ed383aa1f4cd1e8ull);
  std::memset(id.bytes, 0x5a, 16);
  EXPECT_EQ(get(&table, &id), CUDA_ERROR_INVALID_VALUE);
}

TEST(NoServer, CallsFailWithCudaErrorsNotCrashes) {
  auto init = sym<CUresult (*)(unsigned)>("cuInit");
  EXPECT_EQ(init(0), CUDA_ERROR_NO_DEVICE);
  int n = -1;
  EXPECT_EQ(sym<CUresult (*)(int*)>("cuDeviceGetCount")(&n), CUDA_ERROR_NO_DEVICE);
  CUdeviceptr p;
  EXPECT_EQ(sym<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2")(&p, 16), CUDA_ERROR_NO_DEVICE);
  const char* s = nullptr;
  EXPECT_EQ(sym<CUresult (*)(CUresult, const char**)>("cuGetErrorName")(CUDA_ERROR_NO_DEVICE, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_NO_DEVICE");
}

// The deprecated launch API keeps each function's argument bytes here: writes are checked against what a
// kernel may take (32,764 bytes), and a null function is refused, before anything reaches a worker.
TEST(LegacyLaunch, ArgumentWritesStayWithinWhatAKernelTakes) {
  auto seti = sym<CUresult (*)(CUfunction, int, unsigned)>("cuParamSeti");
  auto setv = sym<CUresult (*)(CUfunction, int, void*, unsigned)>("cuParamSetv");
  auto size = sym<CUresult (*)(CUfunction, unsigned)>("cuParamSetSize");
  auto shape = sym<CUresult (*)(CUfunction, int, int, int)>("cuFuncSetBlockShape");
  auto f = reinterpret_cast<CUfunction>(uintptr_t{0x1234});
  EXPECT_EQ(seti(f, 0, 7), CUDA_SUCCESS);
  EXPECT_EQ(seti(f, 32760, 7), CUDA_SUCCESS);  // the last four bytes
  EXPECT_EQ(seti(f, 32761, 7), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(seti(f, -4, 7), CUDA_ERROR_INVALID_VALUE);
  char big[16] = {};
  EXPECT_EQ(setv(f, 2147483647, big, sizeof big), CUDA_ERROR_INVALID_VALUE);  // no overflow past the end
  EXPECT_EQ(setv(f, 0, nullptr, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(size(f, 32765), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(shape(f, 0, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(seti(nullptr, 0, 7), CUDA_ERROR_INVALID_HANDLE);
}

TEST(Md2, MatchesRfc1319Vectors) {
  auto hex = [](const std::array<uint8_t, 16>& h) {
    char b[33];
    for (int i = 0; i < 16; ++i) std::snprintf(b + 2 * i, 3, "%02x", h[i]);
    return std::string(b);
  };
  EXPECT_EQ(hex(gpool::client::md2("", 0)), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(hex(gpool::client::md2("abc", 3)), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(hex(gpool::client::md2("message digest", 14)), "ab4f496bfb2a530b219ff33031fe06b0");
}

// Device addresses are kept out of the client's own memory (address_space.h).
namespace {
bool mappable(uint64_t page, uint64_t size) {  // nothing is mapped there
  void* p = mmap(reinterpret_cast<void*>(page), size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return false;
  munmap(p, size);
  return p == reinterpret_cast<void*>(page);
}
}  // namespace

TEST(AddressSpace, DeviceRangesAreReservedAndClashesReported) {
  const uint64_t ps = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  void* area = mmap(nullptr, 16 * ps, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(area, MAP_FAILED);
  munmap(area, 16 * ps);  // a free stretch of addresses
  auto base = reinterpret_cast<uint64_t>(area);
  gpool::client::AddressSpace space;
  EXPECT_TRUE(space.reserve(base + 100, 3 * ps));  // pages 0..3
  EXPECT_FALSE(mappable(base + ps, ps));
  EXPECT_TRUE(space.reserve(base + 3 * ps + 512, 100));  // shares page 3
  space.release(base + 100, 3 * ps);
  EXPECT_TRUE(mappable(base, 3 * ps));
  EXPECT_FALSE(mappable(base + 3 * ps, ps));  // still the second allocation's
  space.release(base + 3 * ps + 512, 100);
  EXPECT_TRUE(mappable(base, 16 * ps));

  // Memory the process already has: reported, and left alone when released.
  auto* own = static_cast<char*>(mmap(nullptr, 4 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(own, MAP_FAILED);
  own[0] = 'a';
  own[3 * ps] = 'b';
  EXPECT_FALSE(space.reserve(reinterpret_cast<uint64_t>(own) + 10, 3 * ps));
  space.release(reinterpret_cast<uint64_t>(own) + 10, 3 * ps);
  EXPECT_EQ(own[0], 'a');  // still readable and writable
  EXPECT_EQ(own[3 * ps], 'b');
  own[ps] = 'c';
  munmap(own, 4 * ps);
}
