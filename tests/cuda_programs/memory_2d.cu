// Pitched memory, 2D/3D copies and memsets, and peer copies through gpool, checked by value (no kernels,
// so the same checks hold on the sim backend and on a GPU).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "checks.h"

namespace {

constexpr int kW = 100, kH = 37;  // a matrix of floats, rows not a multiple of any alignment

float value(int y, int x) { return static_cast<float>(y * 1000 + x); }


void pitched2D() {
  float* d = nullptr;
  size_t pitch = 0;
  CK(cudaMallocPitch(reinterpret_cast<void**>(&d), &pitch, kW * sizeof(float), kH));
  check(pitch >= kW * sizeof(float) && pitch % 4 == 0, "cudaMallocPitch pitch covers a row");
  std::vector<float> h(kW * kH), back(kW * kH, -1.0f);
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) h[y * kW + x] = value(y, x);
  CK(cudaMemcpy2D(d, pitch, h.data(), kW * sizeof(float), kW * sizeof(float), kH, cudaMemcpyHostToDevice));
  CK(cudaMemcpy2D(back.data(), kW * sizeof(float), d, pitch, kW * sizeof(float), kH, cudaMemcpyDeviceToHost));
  check(back == h, "cudaMemcpy2D host -> pitched device -> host round trip");

  // A sub-rectangle: rows 5..9, columns 10..19, zeroed with cudaMemset2D.
  CK(cudaMemset2D(reinterpret_cast<char*>(d) + 5 * pitch + 10 * sizeof(float), pitch, 0, 10 * sizeof(float), 5));
  CK(cudaMemcpy2D(back.data(), kW * sizeof(float), d, pitch, kW * sizeof(float), kH, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) {
      bool zeroed = y >= 5 && y < 10 && x >= 10 && x < 20;
      ok &= back[y * kW + x] == (zeroed ? 0.0f : value(y, x));
    }
  check(ok, "cudaMemset2D zeroes exactly its rectangle");

  // Device to device into a second pitched buffer, then out to a host buffer with a wider pitch.
  float* d2 = nullptr;
  size_t pitch2 = 0;
  CK(cudaMallocPitch(reinterpret_cast<void**>(&d2), &pitch2, 64 * sizeof(float), 20));
  CK(cudaMemcpy2D(d2, pitch2, d + 10, pitch, 64 * sizeof(float), 20, cudaMemcpyDeviceToDevice));
  const size_t wide = 80;  // host row of 80 floats
  std::vector<float> h2(wide * 20, -1.0f);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CK(cudaMemcpy2DAsync(h2.data(), wide * sizeof(float), d2, pitch2, 64 * sizeof(float), 20, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  ok = true;
  for (int y = 0; y < 20; ++y)
    for (int x = 0; x < 80; ++x) {
      float want = x >= 64 ? -1.0f : (y >= 5 && y < 10 && x < 10) ? 0.0f : value(y, x + 10);
      ok &= h2[y * wide + x] == want;
    }
  check(ok, "cudaMemcpy2D device -> device and cudaMemcpy2DAsync device -> host keep each side's pitch");

  // 16- and 32-bit 2D memsets through the driver API.
  CK(cudaMemset2D(d2, pitch2, 0, 64 * sizeof(float), 20));
  auto memsetD2D16 = driverEntryPoint<CUresult (*)(CUdeviceptr, size_t, unsigned short, size_t, size_t)>("cuMemsetD2D16");
  auto memsetD2D32Async = driverEntryPoint<CUresult (*)(CUdeviceptr, size_t, unsigned int, size_t, size_t, CUstream)>("cuMemsetD2D32Async");
  check(memsetD2D16(reinterpret_cast<CUdeviceptr>(d2), pitch2, 0xabcd, 3, 2) == CUDA_SUCCESS, "cuMemsetD2D16");
  check(memsetD2D32Async(reinterpret_cast<CUdeviceptr>(d2) + 2 * pitch2, pitch2, 0x01020304u, 2, 1, s) == CUDA_SUCCESS,
        "cuMemsetD2D32Async");
  std::vector<uint8_t> raw(3 * pitch2);
  CK(cudaMemcpyAsync(raw.data(), d2, raw.size(), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  uint16_t a16[3];
  uint32_t a32[2];
  std::memcpy(a16, raw.data() + pitch2, sizeof a16);
  std::memcpy(a32, raw.data() + 2 * pitch2, sizeof a32);
  check(a16[0] == 0xabcd && a16[2] == 0xabcd && raw[pitch2 + 6] == 0 && a32[0] == 0x01020304u && a32[1] == 0x01020304u &&
            raw[2 * pitch2 + 8] == 0,
        "16- and 32-bit 2D memsets write their values and nothing past their width");
  // A copy past the end of the allocation is refused, not performed (gpool checks it; the driver does not).
  if (throughGpool())
    check(cudaMemcpy2D(d2, pitch2, h.data(), kW * sizeof(float), kW * sizeof(float), 40, cudaMemcpyHostToDevice) != cudaSuccess,
          "a 2D copy past the allocation's end is refused");
  cudaGetLastError();
  CK(cudaStreamDestroy(s));
  CK(cudaFree(d));
  CK(cudaFree(d2));
}

void volume3D() {
  cudaExtent extent = make_cudaExtent(24 * sizeof(int), 7, 5);  // 24 ints by 7 rows by 5 slices
  cudaPitchedPtr dev;
  CK(cudaMalloc3D(&dev, extent));
  std::vector<int> h(24 * 7 * 5), back(h.size(), -1);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<int>(i * 7 + 3);
  cudaMemcpy3DParms up{};
  up.srcPtr = make_cudaPitchedPtr(h.data(), 24 * sizeof(int), 24, 7);
  up.dstPtr = dev;
  up.extent = extent;
  up.kind = cudaMemcpyHostToDevice;
  CK(cudaMemcpy3D(&up));
  CK(cudaMemset3D(make_cudaPitchedPtr(static_cast<char*>(dev.ptr) + 2 * dev.pitch * 7, dev.pitch, dev.xsize, dev.ysize), 0,
                  make_cudaExtent(4 * sizeof(int), 7, 1)));  // slice 2: first 4 ints of each row zeroed
  cudaMemcpy3DParms down{};
  down.srcPtr = dev;
  down.dstPtr = make_cudaPitchedPtr(back.data(), 24 * sizeof(int), 24, 7);
  down.extent = extent;
  down.kind = cudaMemcpyDeviceToHost;
  CK(cudaMemcpy3D(&down));
  bool ok = true;
  for (int z = 0; z < 5; ++z)
    for (int y = 0; y < 7; ++y)
      for (int x = 0; x < 24; ++x) {
        size_t i = (z * 7 + y) * 24 + x;
        ok &= back[i] == (z == 2 && x < 4 ? 0 : h[i]);
      }
  check(ok, "cudaMalloc3D, cudaMemcpy3D both ways and cudaMemset3D on one slice");
  CK(cudaFree(dev.ptr));
}

void peer() {
  const size_t n = 1 << 20;
  std::vector<uint8_t> h(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<uint8_t>(i * 13 + 1);
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, n));
  CK(cudaMalloc(&b, n));
  CK(cudaMemcpy(a, h.data(), n, cudaMemcpyHostToDevice));
  CK(cudaMemcpyPeer(b, 0, a, 0, n));
  CK(cudaMemcpy(back.data(), b, n, cudaMemcpyDeviceToHost));
  check(back == h, "cudaMemcpyPeer within the lease's device");
  CK(cudaMemset(b, 0, n));
  CK(cudaMemcpyPeerAsync(b, 0, a, 0, n / 2, 0));
  CK(cudaMemcpy(back.data(), b, n, cudaMemcpyDeviceToHost));
  check(std::memcmp(back.data(), h.data(), n / 2) == 0 && back[n / 2] == 0 && back[n - 1] == 0, "cudaMemcpyPeerAsync of half");
  // The driver entry point, with explicit contexts.
  auto cuCtxGetCurrent = driverEntryPoint<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  auto cuMemcpyPeer = driverEntryPoint<CUresult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t)>("cuMemcpyPeer");
  CUcontext ctx = nullptr;
  check(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != nullptr, "a current context");
  check(cuMemcpyPeer(reinterpret_cast<CUdeviceptr>(b), ctx, reinterpret_cast<CUdeviceptr>(a), ctx, n) == CUDA_SUCCESS,
        "cuMemcpyPeer between the lease's contexts");
  check(cuMemcpyPeer(reinterpret_cast<CUdeviceptr>(b), reinterpret_cast<CUcontext>(0x1234), reinterpret_cast<CUdeviceptr>(a), ctx, n) ==
            CUDA_ERROR_INVALID_CONTEXT,
        "cuMemcpyPeer with a bogus context is refused");
  CK(cudaFree(a));
  CK(cudaFree(b));
}

}  // namespace

// CUDA 13's batched copies: host to device, device to device and device to host in one call.
void batched() {
  const size_t n = 4096;
  std::vector<uint8_t> h(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<uint8_t>(i * 7 + 5);
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, n));
  CK(cudaMalloc(&b, n));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  auto batch = driverEntryPoint<CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*, size_t*, size_t, CUstream)>(
      "cuMemcpyBatchAsync", 13000);
  CUdeviceptr dsts[] = {reinterpret_cast<CUdeviceptr>(a), reinterpret_cast<CUdeviceptr>(b), reinterpret_cast<CUdeviceptr>(back.data())};
  CUdeviceptr srcs[] = {reinterpret_cast<CUdeviceptr>(h.data()), reinterpret_cast<CUdeviceptr>(a), reinterpret_cast<CUdeviceptr>(b)};
  size_t sizes[] = {n, n, n};
  CUmemcpyAttributes attr{};
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  attr.srcLocHint.type = CU_MEM_LOCATION_TYPE_HOST;
  attr.dstLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
  size_t idx = 0;
  check(batch(dsts, srcs, sizes, 3, &attr, &idx, 1, s) == CUDA_SUCCESS, "cuMemcpyBatchAsync of three copies");
  CK(cudaStreamSynchronize(s));
  check(back == h, "the batch ran in order: host -> a -> b -> host");
  CK(cudaStreamDestroy(s));
  CK(cudaFree(a));
  CK(cudaFree(b));
}

int main() {
  CK(cudaSetDevice(0));
  pitched2D();
  volume3D();
  peer();
  batched();
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
