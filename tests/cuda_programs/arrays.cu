// CUDA arrays through gpool, checked by value (no kernels, so the same checks hold on the sim backend and
// on a GPU): 2D, 3D and layered arrays made through NVIDIA's runtime, copies in and out of them from host
// memory, device memory and other arrays (whole, sub-rectangles, slices, asynchronous), the driver's 1D
// copies across rows, descriptors, the lease's memory, and copies that do not fit refused; texture and
// surface objects over arrays and device memory; mipmapped arrays; batched 3D copies.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "checks.h"

namespace {

constexpr int kW = 100, kH = 37;  // elements per row, rows: a row is not a multiple of any alignment

float value(int z, int y, int x) { return static_cast<float>(z * 100000 + y * 1000 + x); }

std::vector<float> plane(int z, int w, int h) {
  std::vector<float> v(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) v[static_cast<size_t>(y) * w + x] = value(z, y, x);
  return v;
}

// `depth` planes of kW x kH, one after the other.
std::vector<float> slices(int depth) {
  std::vector<float> h;
  for (int z = 0; z < depth; ++z) {
    std::vector<float> p = plane(z, kW, kH);
    h.insert(h.end(), p.begin(), p.end());
  }
  return h;
}

void twoD() {
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t a = nullptr, b = nullptr;
  size_t free_before = 0, free_after = 0, total = 0;
  CK(cudaMemGetInfo(&free_before, &total));
  CK(cudaMallocArray(&a, &desc, kW, kH));
  CK(cudaMemGetInfo(&free_after, &total));
  check(free_before - free_after >= kW * kH * sizeof(float), "a 2D array counts against the device's memory");

  cudaChannelFormatDesc got{};
  cudaExtent extent{};
  unsigned flags = 99;
  CK(cudaArrayGetInfo(&got, &extent, &flags, a));
  check(got.x == 32 && got.f == cudaChannelFormatKindFloat && extent.width == kW && extent.height == kH && extent.depth == 0 && flags == 0,
        "cudaArrayGetInfo gives the array's format and extent");

  const std::vector<float> h = plane(0, kW, kH);
  std::vector<float> back(h.size(), -1.0f);
  const size_t row = kW * sizeof(float);
  CK(cudaMemcpy2DToArray(a, 0, 0, h.data(), row, row, kH, cudaMemcpyHostToDevice));
  CK(cudaMemcpy2DFromArray(back.data(), row, a, 0, 0, row, kH, cudaMemcpyDeviceToHost));
  check(back == h, "cudaMemcpy2DToArray / FromArray: host -> array -> host round trip");

  // A sub-rectangle out of the array: columns 10..29 of rows 5..14, into a host buffer 32 floats wide.
  std::vector<float> sub(32 * 10, -1.0f);
  CK(cudaMemcpy2DFromArray(sub.data(), 32 * sizeof(float), a, 10 * sizeof(float), 5, 20 * sizeof(float), 10, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 32; ++x) ok &= sub[y * 32 + x] == (x < 20 ? value(0, y + 5, x + 10) : -1.0f);
  check(ok, "a sub-rectangle of an array, into a wider host pitch");

  // Array -> pitched device memory -> a second array -> host.
  float* d = nullptr;
  size_t pitch = 0;
  CK(cudaMallocPitch(reinterpret_cast<void**>(&d), &pitch, row, kH));
  CK(cudaMemcpy2DFromArray(d, pitch, a, 0, 0, row, kH, cudaMemcpyDeviceToDevice));
  CK(cudaMallocArray(&b, &desc, kW, kH));
  CK(cudaMemcpy2DToArray(b, 0, 0, d, pitch, row, kH, cudaMemcpyDeviceToDevice));
  std::fill(back.begin(), back.end(), -1.0f);
  CK(cudaMemcpy2DFromArray(back.data(), row, b, 0, 0, row, kH, cudaMemcpyDeviceToHost));
  check(back == h, "array -> pitched device memory -> array");

  // Array to array, shifted: b's rows 0..9 get a's rows 20..29, asynchronously on a stream.
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CK(cudaMemcpy2DArrayToArray(b, 0, 0, a, 0, 20, row, 10, cudaMemcpyDeviceToDevice));
  std::vector<float> zeros(kW * 3, 0.0f);
  CK(cudaMemcpy2DToArrayAsync(b, 0, 10, zeros.data(), row, row, 3, cudaMemcpyHostToDevice, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy2DFromArray(back.data(), row, b, 0, 0, row, kH, cudaMemcpyDeviceToHost));
  ok = true;
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) {
      float want = y < 10 ? value(0, y + 20, x) : y < 13 ? 0.0f : value(0, y, x);
      ok &= back[y * kW + x] == want;
    }
  check(ok, "cudaMemcpy2DArrayToArray and an asynchronous host-to-array copy");

  // Copies that do not fit the array are refused, and the array is unchanged.
  check(cudaMemcpy2DToArray(a, 90 * sizeof(float), 0, h.data(), row, 20 * sizeof(float), 1, cudaMemcpyHostToDevice) != cudaSuccess,
        "a copy past the end of a row is refused");
  check(cudaMemcpy2DFromArray(back.data(), row, a, 0, 30, row, 10, cudaMemcpyDeviceToHost) != cudaSuccess,
        "a copy past the last row is refused");
  cudaGetLastError();
  CK(cudaMemcpy2DFromArray(back.data(), row, a, 0, 0, row, kH, cudaMemcpyDeviceToHost));
  check(back == h, "the array is unchanged by the refused copies");

  CK(cudaStreamDestroy(s));
  CK(cudaFree(d));
  CK(cudaFreeArray(a));
  CK(cudaFreeArray(b));
  size_t free_end = 0;
  CK(cudaMemGetInfo(&free_end, &total));
  check(free_end >= free_before, "freed arrays give their memory back");
}

void threeD() {
  constexpr int kD = 5;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t a = nullptr;
  CK(cudaMalloc3DArray(&a, &desc, make_cudaExtent(kW, kH, kD)));
  std::vector<float> h = slices(kD);
  cudaMemcpy3DParms in{};
  in.srcPtr = make_cudaPitchedPtr(h.data(), kW * sizeof(float), kW, kH);
  in.dstArray = a;
  in.extent = make_cudaExtent(kW, kH, kD);
  in.kind = cudaMemcpyHostToDevice;
  CK(cudaMemcpy3D(&in));
  std::vector<float> back(h.size(), -1.0f);
  cudaMemcpy3DParms out{};
  out.srcArray = a;
  out.dstPtr = make_cudaPitchedPtr(back.data(), kW * sizeof(float), kW, kH);
  out.extent = make_cudaExtent(kW, kH, kD);
  out.kind = cudaMemcpyDeviceToHost;
  CK(cudaMemcpy3D(&out));
  check(back == h, "cudaMemcpy3D host -> 3D array -> host, every slice");

  // A box out of the middle: x 3..12, y 4..9, slices 2..3, through device memory.
  cudaPitchedPtr dev{};
  CK(cudaMalloc3D(&dev, make_cudaExtent(10 * sizeof(float), 6, 2)));
  cudaMemcpy3DParms box{};
  box.srcArray = a;
  box.srcPos = make_cudaPos(3, 4, 2);  // (x in elements for an array)
  box.dstPtr = dev;
  box.extent = make_cudaExtent(10, 6, 2);
  box.kind = cudaMemcpyDeviceToDevice;
  CK(cudaMemcpy3D(&box));
  std::vector<float> got(10 * 6 * 2, -1.0f);
  cudaMemcpy3DParms down{};
  down.srcPtr = dev;
  down.dstPtr = make_cudaPitchedPtr(got.data(), 10 * sizeof(float), 10, 6);
  down.extent = make_cudaExtent(10 * sizeof(float), 6, 2);
  down.kind = cudaMemcpyDeviceToHost;
  CK(cudaMemcpy3D(&down));
  bool ok = true;
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 10; ++x) ok &= got[(z * 6 + y) * 10 + x] == value(z + 2, y + 4, x + 3);
  check(ok, "a box of a 3D array (srcPos) into 3D device memory");

  cudaExtent extent{};
  CK(cudaArrayGetInfo(nullptr, &extent, nullptr, a));
  check(extent.width == kW && extent.height == kH && extent.depth == kD, "cudaArrayGetInfo of a 3D array");
  cudaMemcpy3DParms past = in;
  past.dstPos = make_cudaPos(0, 0, 1);  // five slices from slice 1: the last is past the end
  check(cudaMemcpy3D(&past) != cudaSuccess, "a 3D copy past the last slice is refused");
  cudaGetLastError();
  CK(cudaFree(dev.ptr));
  CK(cudaFreeArray(a));
}

void layered() {
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<uchar4>();
  cudaArray_t a = nullptr;
  CK(cudaMalloc3DArray(&a, &desc, make_cudaExtent(64, 16, 3), cudaArrayLayered | cudaArraySurfaceLoadStore));
  unsigned flags = 0;
  CK(cudaArrayGetInfo(nullptr, nullptr, &flags, a));
  check(flags == (cudaArrayLayered | cudaArraySurfaceLoadStore), "a layered surface array keeps its flags");
  std::vector<uchar4> layer(64 * 16);
  for (size_t i = 0; i < layer.size(); ++i) layer[i] = make_uchar4(i & 255, 1, 2, 3);
  cudaMemcpy3DParms in{};
  in.srcPtr = make_cudaPitchedPtr(layer.data(), 64 * sizeof(uchar4), 64, 16);
  in.dstArray = a;
  in.dstPos = make_cudaPos(0, 0, 2);
  in.extent = make_cudaExtent(64, 16, 1);
  in.kind = cudaMemcpyHostToDevice;
  CK(cudaMemcpy3D(&in));
  std::vector<uchar4> back(layer.size());
  cudaMemcpy3DParms out{};
  out.srcArray = a;
  out.srcPos = make_cudaPos(0, 0, 2);
  out.dstPtr = make_cudaPitchedPtr(back.data(), 64 * sizeof(uchar4), 64, 16);
  out.extent = make_cudaExtent(64, 16, 1);
  out.kind = cudaMemcpyDeviceToHost;
  CK(cudaMemcpy3D(&out));
  check(std::memcmp(back.data(), layer.data(), layer.size() * sizeof(uchar4)) == 0, "one layer of a layered array, in and out");
  CK(cudaFreeArray(a));
}

// The driver's 1D copies, of 1D arrays: a byte range at any offset. A 2D array's are refused (NVIDIA's
// driver refused this program's first version, which copied a 2D array's rows end to end).
void linear() {
  auto htoA = driverEntryPoint<CUresult (*)(CUarray, size_t, const void*, size_t)>("cuMemcpyHtoA");
  auto atoH = driverEntryPoint<CUresult (*)(void*, CUarray, size_t, size_t)>("cuMemcpyAtoH");
  auto atoA = driverEntryPoint<CUresult (*)(CUarray, size_t, CUarray, size_t, size_t)>("cuMemcpyAtoA");
  auto create = driverEntryPoint<CUresult (*)(CUarray*, const CUDA_ARRAY_DESCRIPTOR*)>("cuArrayCreate");
  auto describe = driverEntryPoint<CUresult (*)(CUDA_ARRAY_DESCRIPTOR*, CUarray)>("cuArrayGetDescriptor");
  auto destroy = driverEntryPoint<CUresult (*)(CUarray)>("cuArrayDestroy");
  CUDA_ARRAY_DESCRIPTOR d{};
  d.Width = 400;  // 400 x 2 bytes, one row
  d.Height = 0;
  d.Format = CU_AD_FORMAT_UNSIGNED_INT16;
  d.NumChannels = 1;
  CUarray a = nullptr, b = nullptr, flat = nullptr;
  check(create(&a, &d) == CUDA_SUCCESS && create(&b, &d) == CUDA_SUCCESS, "cuArrayCreate");
  CUDA_ARRAY_DESCRIPTOR got{};
  check(describe(&got, a) == CUDA_SUCCESS && got.Width == 400 && got.Height == 0 && got.Format == CU_AD_FORMAT_UNSIGNED_INT16 &&
            got.NumChannels == 1,
        "cuArrayGetDescriptor");
  std::vector<uint8_t> h(800);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> back(800, 0);
  check(htoA(a, 0, h.data(), h.size()) == CUDA_SUCCESS, "cuMemcpyHtoA of the whole 1D array");
  check(atoH(back.data(), a, 0, back.size()) == CUDA_SUCCESS && back == h, "cuMemcpyAtoH gives it back");
  check(atoA(b, 30, a, 150, 300) == CUDA_SUCCESS, "cuMemcpyAtoA of 300 bytes, at other offsets");
  std::vector<uint8_t> part(300, 0);
  check(atoH(part.data(), b, 30, 300) == CUDA_SUCCESS && std::memcmp(part.data(), h.data() + 150, 300) == 0,
        "cuMemcpyAtoA moved the right bytes");
  check(htoA(a, 700, h.data(), 101) == CUDA_ERROR_INVALID_VALUE, "cuMemcpyHtoA past the array's end is refused");
  d.Width = 50;  // 50 x 2 bytes per row, 8 rows
  d.Height = 8;
  CK(static_cast<cudaError_t>(create(&flat, &d)));
  check(htoA(flat, 0, h.data(), 100) != CUDA_SUCCESS, "cuMemcpyHtoA into a 2D array is refused");
  check(destroy(a) == CUDA_SUCCESS && destroy(b) == CUDA_SUCCESS && destroy(flat) == CUDA_SUCCESS, "cuArrayDestroy");
  check(destroy(a) != CUDA_SUCCESS, "an array destroyed twice is refused the second time");
}

// Texture and surface objects over arrays and device memory: made, described back, destroyed; what a
// resource may not be is refused. (No kernel samples them here: that needs a GPU.)
void textures() {
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t a = nullptr, plain = nullptr;
  CK(cudaMallocArray(&a, &desc, 64, 32, cudaArraySurfaceLoadStore));
  CK(cudaMallocArray(&plain, &desc, 64, 32));
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = a;
  cudaTextureDesc tex{};
  tex.addressMode[0] = tex.addressMode[1] = cudaAddressModeClamp;
  tex.filterMode = cudaFilterModeLinear;
  tex.readMode = cudaReadModeElementType;
  tex.normalizedCoords = 1;
  cudaTextureObject_t t = 0;
  CK(cudaCreateTextureObject(&t, &res, &tex, nullptr));
  check(t != 0, "cudaCreateTextureObject over an array");
  cudaResourceDesc res_back{};
  cudaTextureDesc tex_back{};
  CK(cudaGetTextureObjectResourceDesc(&res_back, t));
  CK(cudaGetTextureObjectTextureDesc(&tex_back, t));
  check(res_back.resType == cudaResourceTypeArray && res_back.res.array.array == a, "its resource descriptor names the array");
  check(tex_back.filterMode == cudaFilterModeLinear && tex_back.normalizedCoords == 1 && tex_back.addressMode[1] == cudaAddressModeClamp,
        "its texture descriptor comes back");

  // Linear and pitched device memory, one with a resource view.
  float* lin = nullptr;
  CK(cudaMalloc(&lin, 4096));
  cudaResourceDesc linear{};
  linear.resType = cudaResourceTypeLinear;
  linear.res.linear.devPtr = lin;
  linear.res.linear.desc = desc;
  linear.res.linear.sizeInBytes = 4096;
  cudaTextureObject_t tl = 0;
  tex.filterMode = cudaFilterModePoint;
  tex.normalizedCoords = 0;
  CK(cudaCreateTextureObject(&tl, &linear, &tex, nullptr));
  float* pitched = nullptr;
  size_t pitch = 0;
  CK(cudaMallocPitch(reinterpret_cast<void**>(&pitched), &pitch, 64 * sizeof(float), 16));
  cudaResourceDesc rows{};
  rows.resType = cudaResourceTypePitch2D;
  rows.res.pitch2D.devPtr = pitched;
  rows.res.pitch2D.desc = desc;
  rows.res.pitch2D.width = 64;
  rows.res.pitch2D.height = 16;
  rows.res.pitch2D.pitchInBytes = pitch;
  cudaResourceViewDesc view{};
  view.format = cudaResViewFormatFloat1;
  view.width = 64;
  view.height = 16;
  cudaTextureObject_t tp = 0;
  CK(cudaCreateTextureObject(&tp, &rows, &tex, &view));
  cudaResourceViewDesc view_back{};
  CK(cudaGetTextureObjectResourceViewDesc(&view_back, tp));
  check(tl != 0 && tp != 0 && tl != tp && view_back.width == 64 && view_back.height == 16 && view_back.format == cudaResViewFormatFloat1,
        "textures over linear and pitched device memory, with a resource view");

  linear.res.linear.sizeInBytes = 8192;  // past the allocation
  cudaTextureObject_t bad = 0;
  if (throughGpool())  // gpool checks a resource against the program's memory; the driver does not
    check(cudaCreateTextureObject(&bad, &linear, &tex, nullptr) != cudaSuccess, "a texture over memory past its allocation is refused");
  cudaGetLastError();

  cudaSurfaceObject_t surf = 0;
  CK(cudaCreateSurfaceObject(&surf, &res));
  cudaResourceDesc surf_back{};
  CK(cudaGetSurfaceObjectResourceDesc(&surf_back, surf));
  check(surf != 0 && surf_back.res.array.array == a, "cudaCreateSurfaceObject over a surface array");
  // An array made without cudaArraySurfaceLoadStore takes a surface too: NVIDIA's driver makes one (H200).
  res.res.array.array = plain;
  cudaSurfaceObject_t also = 0;
  check(cudaCreateSurfaceObject(&also, &res) == cudaSuccess && also != 0, "a surface over an array not made for surfaces, as the driver allows");
  if (also) CK(cudaDestroySurfaceObject(also));
  res.res.array.array = a;
  res.resType = cudaResourceTypeLinear;
  cudaSurfaceObject_t no = 0;
  check(cudaCreateSurfaceObject(&no, &res) != cudaSuccess, "a surface over linear memory is refused");
  cudaGetLastError();
  res.resType = cudaResourceTypeArray;

  CK(cudaDestroySurfaceObject(surf));
  CK(cudaDestroyTextureObject(t));
  CK(cudaDestroyTextureObject(tl));
  CK(cudaDestroyTextureObject(tp));
  // Object 0 is none: destroying it succeeds (NVIDIA's volumeFiltering sample destroys a surface it never made).
  check(cudaDestroySurfaceObject(0) == cudaSuccess && cudaDestroyTextureObject(0) == cudaSuccess,
        "destroying surface and texture object 0 succeeds");
  CK(cudaFreeArray(a));
  res.res.array.array = a;  // destroyed
  check(cudaCreateTextureObject(&bad, &res, &tex, nullptr) != cudaSuccess, "a texture over a destroyed array is refused");
  cudaGetLastError();
  CK(cudaFreeArray(plain));
  CK(cudaFree(lin));
  CK(cudaFree(pitched));
}

// A mipmapped array: each level is an array of half the size of the one before; copies to and from each
// level, and a texture over the whole mipmap.
void mipmapped() {
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaMipmappedArray_t m = nullptr;
  size_t free_before = 0, free_after = 0, total = 0;
  CK(cudaMemGetInfo(&free_before, &total));
  CK(cudaMallocMipmappedArray(&m, &desc, make_cudaExtent(64, 32, 0), 4));
  CK(cudaMemGetInfo(&free_after, &total));
  check(free_before - free_after >= (64 * 32 + 32 * 16 + 16 * 8 + 8 * 4) * sizeof(float), "a mipmapped array counts all its levels");
  bool ok = true;
  for (unsigned l = 0; l < 4; ++l) {
    cudaArray_t level = nullptr;
    CK(cudaGetMipmappedArrayLevel(&level, m, l));
    cudaExtent e{};
    CK(cudaArrayGetInfo(nullptr, &e, nullptr, level));
    const size_t w = 64 >> l, h = 32 >> l;
    ok &= e.width == w && e.height == h;
    const std::vector<float> in = plane(static_cast<int>(l), static_cast<int>(w), static_cast<int>(h));
    std::vector<float> out(in.size(), -1.0f);
    CK(cudaMemcpy2DToArray(level, 0, 0, in.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
    CK(cudaMemcpy2DFromArray(out.data(), w * sizeof(float), level, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToHost));
    ok &= out == in;
  }
  check(ok, "each of four levels has half the extent of the one before, and holds what is copied in");
  cudaArray_t none = nullptr;
  check(cudaGetMipmappedArrayLevel(&none, m, 4) != cudaSuccess, "a level past the last is refused");
  cudaGetLastError();
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeMipmappedArray;
  res.res.mipmap.mipmap = m;
  cudaTextureDesc tex{};
  tex.filterMode = cudaFilterModeLinear;
  tex.mipmapFilterMode = cudaFilterModeLinear;
  tex.maxMipmapLevelClamp = 3;
  tex.normalizedCoords = 1;
  tex.readMode = cudaReadModeElementType;
  cudaTextureObject_t t = 0;
  CK(cudaCreateTextureObject(&t, &res, &tex, nullptr));
  cudaResourceDesc back{};
  CK(cudaGetTextureObjectResourceDesc(&back, t));
  check(t != 0 && back.resType == cudaResourceTypeMipmappedArray && back.res.mipmap.mipmap == m, "a texture over a mipmapped array");
  CK(cudaDestroyTextureObject(t));
  CK(cudaFreeMipmappedArray(m));
  size_t free_end = 0;
  CK(cudaMemGetInfo(&free_end, &total));
  check(free_end >= free_before, "a freed mipmapped array gives its memory back");
}

cudaMemcpy3DOperand pointerOperand(void* p, size_t row_length) {
  cudaMemcpy3DOperand o{};
  o.type = cudaMemcpyOperandTypePointer;
  o.op.ptr.ptr = p;
  o.op.ptr.rowLength = row_length;  // 0: rows packed
  return o;
}

cudaMemcpy3DOperand arrayOperand(cudaArray_t a, size_t x, size_t y, size_t z) {
  cudaMemcpy3DOperand o{};
  o.type = cudaMemcpyOperandTypeArray;
  o.op.array.array = a;
  o.op.array.offset = {x, y, z};
  return o;
}

cudaMemcpy3DBatchOp batchOp(cudaMemcpy3DOperand src, cudaMemcpy3DOperand dst, cudaExtent extent) {
  cudaMemcpy3DBatchOp op{};
  op.src = src;
  op.dst = dst;
  op.extent = extent;
  op.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  return op;
}

// cudaMemcpy3DBatchAsync (CUDA 12.8): one batch copies host slices into a 3D array and into device memory
// with longer rows, a second copies a box of the array and the device memory back; an array's extents and
// offsets count its elements, a pointer-to-pointer copy's count bytes.
void batched() {
  constexpr int kD = 3;
  constexpr size_t kRow = (kW + 7) * sizeof(float);  // device rows, in bytes
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t a = nullptr;
  CK(cudaMalloc3DArray(&a, &desc, make_cudaExtent(kW, kH, kD)));
  std::vector<float> h = slices(kD);
  void* dev = nullptr;
  CK(cudaMalloc(&dev, kRow * kH * kD));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaMemcpy3DBatchOp in[2] = {batchOp(pointerOperand(h.data(), 0), arrayOperand(a, 0, 0, 0), make_cudaExtent(kW, kH, kD)),
                               batchOp(pointerOperand(h.data(), 0), pointerOperand(dev, kRow), make_cudaExtent(kW * sizeof(float), kH, kD))};
  CK(cudaMemcpy3DBatchAsync(2, in, 0, s));

  std::vector<float> box((kW - 2) * (kH - 1) * (kD - 1), -1.0f), back(h.size(), -1.0f);
  cudaMemcpy3DBatchOp out[2] = {
      batchOp(arrayOperand(a, 2, 1, 1), pointerOperand(box.data(), 0), make_cudaExtent(kW - 2, kH - 1, kD - 1)),
      batchOp(pointerOperand(dev, kRow), pointerOperand(back.data(), 0), make_cudaExtent(kW * sizeof(float), kH, kD))};
  CK(cudaMemcpy3DBatchAsync(2, out, 0, s));
  CK(cudaStreamSynchronize(s));
  check(back == h, "a batch copies host slices into device memory with longer rows, and another copies them back");
  bool ok = true;
  for (int z = 0; z < kD - 1; ++z)
    for (int y = 0; y < kH - 1; ++y)
      for (int x = 0; x < kW - 2; ++x) ok &= box[(static_cast<size_t>(z) * (kH - 1) + y) * (kW - 2) + x] == value(z + 1, y + 1, x + 2);
  check(ok, "a batch copies host slices into a 3D array, and a box of it (offset in elements) back");

  cudaMemcpy3DBatchOp bad = out[1];
  bad.srcAccessOrder = cudaMemcpySrcAccessOrderInvalid;
  check(cudaMemcpy3DBatchAsync(1, &bad, 0, s) != cudaSuccess, "an operation without a source access order is refused");
  cudaGetLastError();
  bad = out[1];
  bad.extent.depth = 0;
  check(cudaMemcpy3DBatchAsync(1, &bad, 0, s) != cudaSuccess, "an empty extent is refused");
  cudaGetLastError();
  check(cudaMemcpy3DBatchAsync(1, out, 1, s) != cudaSuccess, "flags other than 0 are refused");
  cudaGetLastError();
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  CK(cudaFreeArray(a));
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  twoD();
  threeD();
  layered();
  linear();
  textures();
  mipmapped();
  batched();
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
