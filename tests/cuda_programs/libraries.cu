// NVIDIA's CUDA libraries, unmodified, through gpool: a cuBLAS handle, an sgemm, a strided batched gemm
// and an fp16 gemm, a cuBLASLt fp16 matmul with a fused bias and ReLU, a cuFFT plan and execution, a cuDNN
// convolution through its legacy and its graph API, and cuBLAS and cuFFT captured into a CUDA graph. On
// the sim backend the library kernels are recorded, not computed, so results are compared only when
// GPOOL_TEST_EXPECT_COMPUTE=1 (natively, or with the cuda backend on a GPU). Every library call's status
// is checked either way: that is what catches a gap in the driver surface or the private tables without
// a GPU. Prints one line per check; exits 1 on failure.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cufft.h>

#include <cmath>
#include <complex>
#include <string_view>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "checks.h"


static const char* cufftText(cufftResult) { return "cufftResult"; }

#define CKB(call) CHECK_STATUS(call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
#define CKF(call) CHECK_STATUS(call, CUFFT_SUCCESS, cufftText)
#define CKD(call) CHECK_STATUS(call, CUDNN_STATUS_SUCCESS, cudnnGetErrorString)

static float value(int i, int salt) { return static_cast<float>(((i * 37 + salt * 11) % 17) - 8) / 8.0f; }

// C = A * B, column major, m x k times k x n.
static std::vector<float> hostGemm(const std::vector<float>& a, const std::vector<float>& b, int m, int n, int k) {
  std::vector<float> c(static_cast<size_t>(m) * n, 0.0f);
  for (int j = 0; j < n; ++j)
    for (int p = 0; p < k; ++p)
      for (int i = 0; i < m; ++i) c[i + j * m] += a[i + p * m] * b[p + j * k];
  return c;
}

static bool near(const std::vector<float>& x, const std::vector<float>& y, float tol) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::fabs(x[i] - y[i]) > tol * (1.0f + std::fabs(y[i]))) return false;
  return true;
}

static void cublasChecks() {
  cublasHandle_t h = nullptr;
  CKB(cublasCreate(&h));
  check(h != nullptr, "cublasCreate");
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CKB(cublasSetStream(h, s));
  // fp32 without tensor-core rounding, so the host reference matches closely.
  CKB(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));

  const int m = 64, n = 48, k = 32;
  std::vector<float> a(m * k), b(k * n), c(m * n, 0.0f);
  for (int i = 0; i < m * k; ++i) a[i] = value(i, 1);
  for (int i = 0; i < k * n; ++i) b[i] = value(i, 2);
  float *da, *db, *dc;
  CK(cudaMalloc(&da, a.size() * sizeof(float)));
  CK(cudaMalloc(&db, b.size() * sizeof(float)));
  CK(cudaMalloc(&dc, c.size() * sizeof(float)));
  CKB(cublasSetMatrix(m, k, sizeof(float), a.data(), m, da, m));
  CKB(cublasSetMatrix(k, n, sizeof(float), b.data(), k, db, k));
  CK(cudaMemset(dc, 0, c.size() * sizeof(float)));
  const float one = 1.0f, zero = 0.0f;
  CKB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, m, db, k, &zero, dc, m));
  CK(cudaStreamSynchronize(s));
  CKB(cublasGetMatrix(m, n, sizeof(float), dc, m, c.data(), m));
  check(true, "cublasSgemm 64x48x32 issued and synchronized");
  checkComputed(near(c, hostGemm(a, b, m, n, k), 1e-4f), "cublasSgemm result matches the host");

  // A batch of 8 smaller products, strided in one allocation each.
  const int bm = 16, bn = 16, bk = 16, batch = 8;
  const size_t sa = bm * bk, sb = bk * bn, sc = bm * bn;
  std::vector<float> ba(sa * batch), bb(sb * batch), bc(sc * batch, 0.0f);
  for (size_t i = 0; i < ba.size(); ++i) ba[i] = value(static_cast<int>(i), 3);
  for (size_t i = 0; i < bb.size(); ++i) bb[i] = value(static_cast<int>(i), 4);
  float *dba, *dbb, *dbc;
  CK(cudaMalloc(&dba, ba.size() * sizeof(float)));
  CK(cudaMalloc(&dbb, bb.size() * sizeof(float)));
  CK(cudaMalloc(&dbc, bc.size() * sizeof(float)));
  CK(cudaMemcpy(dba, ba.data(), ba.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbb, bb.data(), bb.size() * sizeof(float), cudaMemcpyHostToDevice));
  CKB(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, bm, bn, bk, &one, dba, bm, sa, dbb, bk, sb, &zero,
                                dbc, bm, sc, batch));
  CK(cudaMemcpyAsync(bc.data(), dbc, bc.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  check(true, "cublasSgemmStridedBatched 8 x 16x16x16 issued and synchronized");
  bool batch_ok = true;
  for (int i = 0; i < batch; ++i) {
    std::vector<float> x(ba.begin() + i * sa, ba.begin() + (i + 1) * sa);
    std::vector<float> y(bb.begin() + i * sb, bb.begin() + (i + 1) * sb);
    std::vector<float> z(bc.begin() + i * sc, bc.begin() + (i + 1) * sc);
    batch_ok = batch_ok && near(z, hostGemm(x, y, bm, bn, bk), 1e-4f);
  }
  checkComputed(batch_ok, "cublasSgemmStridedBatched results match the host");

  // Half inputs, single-precision compute and output (cusolverDnDHgesv's gemms; PyTorch's fp16 matmuls):
  // cuBLASLt's half heuristics ask the driver for a private table of their own.
  std::vector<__half> ha(a.size()), hb(b.size());
  for (size_t i = 0; i < a.size(); ++i) ha[i] = __float2half(a[i]);
  for (size_t i = 0; i < b.size(); ++i) hb[i] = __float2half(b[i]);
  __half *dha = nullptr, *dhb = nullptr;
  CK(cudaMalloc(&dha, ha.size() * sizeof(__half)));
  CK(cudaMalloc(&dhb, hb.size() * sizeof(__half)));
  CK(cudaMemcpy(dha, ha.data(), ha.size() * sizeof(__half), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dhb, hb.data(), hb.size() * sizeof(__half), cudaMemcpyHostToDevice));
  CKB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  CKB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dha, CUDA_R_16F, m, dhb, CUDA_R_16F, k, &zero, dc, CUDA_R_32F, m,
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CKB(cublasGetMatrix(m, n, sizeof(float), dc, m, c.data(), m));
  check(true, "cublasGemmEx fp16 x fp16 -> fp32 64x48x32 issued and synchronized");
  checkComputed(near(c, hostGemm(a, b, m, n, k), 1e-2f), "cublasGemmEx fp16 result matches the host");
  CK(cudaFree(dha));
  CK(cudaFree(dhb));

  for (float* p : {da, db, dc, dba, dbb, dbc}) CK(cudaFree(p));
  CKB(cublasDestroy(h));
  CK(cudaStreamDestroy(s));
  check(true, "cublasDestroy");
}

// cuBLAS and cuFFT inside a stream capture, replayed as a CUDA graph, as PyTorch's CUDA graphs (and
// torch.compile's reduce-overhead mode) capture them: cuBLAS with a workspace of its own set beforehand.
static void capturedLibraryChecks() {
  cublasHandle_t h = nullptr;
  CKB(cublasCreate(&h));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CKB(cublasSetStream(h, s));
  CKB(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  const size_t workspace_bytes = 4 << 20;
  void* workspace = nullptr;
  CK(cudaMalloc(&workspace, workspace_bytes));
  CKB(cublasSetWorkspace(h, workspace, workspace_bytes));
  const int m = 32, n = 16, k = 24, points = 128;
  std::vector<float> a(m * k), b(k * n), c(m * n, -1.0f);
  for (int i = 0; i < m * k; ++i) a[i] = value(i, 10);
  for (int i = 0; i < k * n; ++i) b[i] = value(i, 11);
  float *da, *db, *dc;
  cufftComplex* signal;
  CK(cudaMalloc(&da, a.size() * sizeof(float)));
  CK(cudaMalloc(&db, b.size() * sizeof(float)));
  CK(cudaMalloc(&dc, c.size() * sizeof(float)));
  CK(cudaMalloc(&signal, points * sizeof(cufftComplex)));
  CK(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemset(signal, 0, points * sizeof(cufftComplex)));
  cufftHandle plan;
  CKF(cufftPlan1d(&plan, points, CUFFT_C2C, 1));
  CKF(cufftSetStream(plan, s));

  const float one = 1.0f, zero = 0.0f;
  cudaGraph_t graph = nullptr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CKB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, m, db, k, &zero, dc, m));
  CKF(cufftExecC2C(plan, signal, signal, CUFFT_FORWARD));
  CK(cudaStreamEndCapture(s, &graph));
  size_t nodes = 0;
  CK(cudaGraphGetNodes(graph, nullptr, &nodes));
  CHECK(nodes >= 2, "cublasSgemm and cufftExecC2C captured into a graph of %zu nodes", nodes);
  cudaGraphExec_t exec = nullptr;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaMemcpyAsync(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  check(true, "the captured graph replayed twice");
  checkComputed(near(c, hostGemm(a, b, m, n, k), 1e-4f), "the replayed cublasSgemm result matches the host");

  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CKF(cufftDestroy(plan));
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc), static_cast<void*>(signal), workspace})
    CK(cudaFree(p));
  CKB(cublasDestroy(h));
  CK(cudaStreamDestroy(s));
}

// cuBLASLt as PyTorch's addmm calls it for half tensors: fp16 inputs and output, fp32 compute, a bias and
// ReLU fused into the product (epilogue), an algorithm from the heuristics, a workspace, a stream.
static void cublasLtChecks() {
  cublasLtHandle_t lt = nullptr;
  CKB(cublasLtCreate(&lt));
  const int m = 64, n = 48, k = 32;
  std::vector<float> a(m * k), b(k * n), bias(m);
  for (int i = 0; i < m * k; ++i) a[i] = value(i, 7);
  for (int i = 0; i < k * n; ++i) b[i] = value(i, 8);
  for (int i = 0; i < m; ++i) bias[i] = value(i, 9);
  std::vector<float> want = hostGemm(a, b, m, n, k);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) want[i + j * m] = std::max(0.0f, want[i + j * m] + bias[i]);
  auto toDevice = [](const std::vector<float>& x) {
    std::vector<__half> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = __float2half(x[i]);
    __half* d = nullptr;
    CK(cudaMalloc(&d, h.size() * sizeof(__half)));
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(__half), cudaMemcpyHostToDevice));
    return d;
  };
  __half *da = toDevice(a), *db = toDevice(b), *dbias = toDevice(bias), *dd = nullptr;
  CK(cudaMalloc(&dd, static_cast<size_t>(m) * n * sizeof(__half)));

  cublasLtMatmulDesc_t op = nullptr;
  CKB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
  CKB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  CKB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  CKB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, m, k, m));
  CKB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, k, n, k));
  CKB(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16F, m, n, m));
  cublasLtMatmulPreference_t pref = nullptr;
  CKB(cublasLtMatmulPreferenceCreate(&pref));
  const size_t workspace_bytes = 4 << 20;
  CKB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                           sizeof workspace_bytes));
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  CKB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &best, &found));
  check(found == 1, "cublasLtMatmulAlgoGetHeuristic finds an algorithm for fp16 with a bias and ReLU");
  void* workspace = nullptr;
  CK(cudaMalloc(&workspace, workspace_bytes));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  const float one = 1.0f, zero = 0.0f;
  CKB(cublasLtMatmul(lt, op, &one, da, la, db, lb, &zero, dd, ld, dd, ld, &best.algo, workspace, workspace_bytes, s));
  std::vector<__half> got(static_cast<size_t>(m) * n);
  CK(cudaMemcpyAsync(got.data(), dd, got.size() * sizeof(__half), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  check(true, "cublasLtMatmul fp16 64x48x32 with a bias and ReLU issued and synchronized");
  std::vector<float> d(got.size());
  for (size_t i = 0; i < got.size(); ++i) d[i] = __half2float(got[i]);
  checkComputed(near(d, want, 1e-2f), "cublasLtMatmul result matches relu(A B + bias) on the host");

  CKB(cublasLtMatmulPreferenceDestroy(pref));
  for (cublasLtMatrixLayout_t l : {la, lb, ld}) CKB(cublasLtMatrixLayoutDestroy(l));
  CKB(cublasLtMatmulDescDestroy(op));
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dbias), static_cast<void*>(dd), workspace})
    CK(cudaFree(p));
  CK(cudaStreamDestroy(s));
  CKB(cublasLtDestroy(lt));
}

static void cufftChecks() {
  const int n = 256;
  std::vector<std::complex<float>> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = {value(i, 5), value(i, 6)};
  cufftComplex* d;
  CK(cudaMalloc(&d, n * sizeof(cufftComplex)));
  CK(cudaMemcpy(d, x.data(), n * sizeof(cufftComplex), cudaMemcpyHostToDevice));
  cufftHandle plan;
  CKF(cufftPlan1d(&plan, n, CUFFT_C2C, 1));
  check(true, "cufftPlan1d C2C 256");
  CKF(cufftExecC2C(plan, d, d, CUFFT_FORWARD));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(y.data(), d, n * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
  check(true, "cufftExecC2C issued and synchronized");
  // Direct DFT on the host for reference.
  bool ok = true;
  for (int k = 0; k < n && ok; ++k) {
    std::complex<double> acc = 0;
    for (int j = 0; j < n; ++j)
      acc += std::complex<double>(x[j]) * std::polar(1.0, -2.0 * M_PI * j * k / n);
    ok = std::abs(acc - std::complex<double>(y[k])) < 1e-3 * (1.0 + std::abs(acc));
  }
  checkComputed(ok, "cufftExecC2C matches a host DFT");
  CKF(cufftDestroy(plan));
  CK(cudaFree(d));
}

// A 3x3 convolution of ones over a 3-channel 16x16 image of ones, padding 1: each output counts the
// input elements under the filter (27 inside, 18 on an edge, 12 in a corner).
static void cudnnChecks() {
  cudnnHandle_t h = nullptr;
  CKD(cudnnCreate(&h));
  check(h != nullptr, "cudnnCreate");
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  CKD(cudnnCreateTensorDescriptor(&xd));
  CKD(cudnnCreateTensorDescriptor(&yd));
  CKD(cudnnCreateFilterDescriptor(&wd));
  CKD(cudnnCreateConvolutionDescriptor(&cd));
  CKD(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 16, 16));
  CKD(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 3, 3, 3));
  CKD(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  int n = 0, c = 0, hh = 0, w = 0;
  CKD(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &n, &c, &hh, &w));
  CKD(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, hh, w));
  std::vector<float> ones(3 * 16 * 16, 1.0f), out(static_cast<size_t>(n) * c * hh * w, 0.0f);
  float *x, *wt, *y;
  CK(cudaMalloc(&x, ones.size() * sizeof(float)));
  CK(cudaMalloc(&wt, 4 * 27 * sizeof(float)));
  CK(cudaMalloc(&y, out.size() * sizeof(float)));
  CK(cudaMemcpy(x, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(wt, ones.data(), 4 * 27 * sizeof(float), cudaMemcpyHostToDevice));
  const auto algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t ws = 0;
  CKD(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &ws));
  void* wsp = nullptr;
  if (ws) CK(cudaMalloc(&wsp, ws));
  const float one = 1.0f, zero = 0.0f;
  CKD(cudnnConvolutionForward(h, &one, xd, x, wd, wt, cd, algo, wsp, ws, &zero, yd, y));
  CK(cudaMemcpy(out.data(), y, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  check(n == 1 && c == 4 && hh == 16 && w == 16, "cudnnConvolutionForward 3x3 on 3x16x16 issued and copied back");
  checkComputed(out[5 * 16 + 5] == 27.0f && out[0] == 12.0f && out[3] == 18.0f, "cudnn convolution result (27/18/12)");
  for (void* p : {static_cast<void*>(x), static_cast<void*>(wt), static_cast<void*>(y), wsp})
    if (p) CK(cudaFree(p));
  CKD(cudnnDestroyTensorDescriptor(xd));
  CKD(cudnnDestroyTensorDescriptor(yd));
  CKD(cudnnDestroyFilterDescriptor(wd));
  CKD(cudnnDestroyConvolutionDescriptor(cd));
  CKD(cudnnDestroy(h));
}

// The same convolution through cuDNN's graph (backend) API, as PyTorch builds its convolutions (cudnn-frontend):
// tensors, a convolution, an operation graph, the engines its heuristics propose (the first one that makes a
// plan), a variant pack of pointers, cudnnBackendExecute.
namespace dnn_graph {
cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  CKD(cudnnBackendCreateDescriptor(type, &d));
  return d;
}
void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
         const void* values) {
  CKD(cudnnBackendSetAttribute(d, name, type, count, values));
}
void setDescriptor(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value) {
  set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}
// A packed NCHW float tensor.
cudnnBackendDescriptor_t tensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t type = CUDNN_DATA_FLOAT;
  const int64_t dims[] = {n, c, h, w}, strides[] = {c * h * w, h * w, w, 1}, alignment = 16;
  set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  CKD(cudnnBackendFinalize(t));
  return t;
}
// A 3x3 cross-correlation, padding 1, stride 1, in float.
cudnnBackendDescriptor_t convolution() {
  cudnnBackendDescriptor_t c = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t spatial = 2, ones[] = {1, 1};
  const cudnnDataType_t type = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  set(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  set(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  set(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  for (auto name : {CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
                    CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS})
    set(c, name, CUDNN_TYPE_INT64, 2, ones);
  CKD(cudnnBackendFinalize(c));
  return c;
}
// The first of the heuristics' engine configurations that finalizes into a plan (none: nullptr).
cudnnBackendDescriptor_t plan(cudnnHandle_t h, cudnnBackendDescriptor_t graph, int64_t& proposed) {
  cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  setDescriptor(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  CKD(cudnnBackendFinalize(heur));
  CKD(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &proposed, nullptr));
  std::vector<cudnnBackendDescriptor_t> configs(static_cast<size_t>(proposed));
  for (auto& c : configs) c = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t got = 0;
  if (proposed > 0)
    CKD(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, proposed, &got,
                                 configs.data()));
  cudnnBackendDescriptor_t made = nullptr;
  for (int64_t i = 0; i < got && !made; ++i) {
    cudnnBackendDescriptor_t p = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    setDescriptor(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]);
    if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS) made = p;
    else cudnnBackendDestroyDescriptor(p);
  }
  for (auto c : configs) cudnnBackendDestroyDescriptor(c);
  cudnnBackendDestroyDescriptor(heur);
  return made;
}
}  // namespace dnn_graph

static void cudnnGraphChecks() {
  using namespace dnn_graph;
  cudnnHandle_t h = nullptr;
  CKD(cudnnCreate(&h));
  const int64_t x_uid = 1, w_uid = 2, y_uid = 3;
  cudnnBackendDescriptor_t x = tensor(x_uid, 1, 3, 16, 16), w = tensor(w_uid, 4, 3, 3, 3), y = tensor(y_uid, 1, 4, 16, 16);
  cudnnBackendDescriptor_t conv = convolution();
  cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  setDescriptor(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x);
  setDescriptor(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w);
  setDescriptor(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y);
  setDescriptor(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
  const float alpha = 1.0f, beta = 0.0f;
  set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  CKD(cudnnBackendFinalize(op));
  cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  setDescriptor(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, op);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  CKD(cudnnBackendFinalize(graph));
  int64_t proposed = 0;
  cudnnBackendDescriptor_t p = plan(h, graph, proposed);
  char detail[64];
  std::snprintf(detail, sizeof detail, "%lld engine configurations proposed", static_cast<long long>(proposed));
  check(p != nullptr, "cuDNN graph: an engine of the heuristics makes an execution plan", detail);
  if (!p) return;
  int64_t workspace_bytes = 0, got = 0;
  CKD(cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &workspace_bytes));

  std::vector<float> ones(3 * 16 * 16, 1.0f), out(4 * 16 * 16, 0.0f);
  float *dx, *dw, *dy;
  void* workspace = nullptr;
  CK(cudaMalloc(&dx, ones.size() * sizeof(float)));
  CK(cudaMalloc(&dw, 4 * 27 * sizeof(float)));
  CK(cudaMalloc(&dy, out.size() * sizeof(float)));
  if (workspace_bytes > 0) CK(cudaMalloc(&workspace, static_cast<size_t>(workspace_bytes)));
  CK(cudaMemcpy(dx, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, ones.data(), 4 * 27 * sizeof(float), cudaMemcpyHostToDevice));
  cudnnBackendDescriptor_t pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[] = {x_uid, w_uid, y_uid};
  void* pointers[] = {dx, dw, dy};
  set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
  set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  CKD(cudnnBackendFinalize(pack));
  CKD(cudnnBackendExecute(h, p, pack));
  CK(cudaMemcpy(out.data(), dy, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  check(true, "cudnnBackendExecute of the convolution's plan issued and copied back");
  checkComputed(out[5 * 16 + 5] == 27.0f && out[0] == 12.0f && out[3] == 18.0f, "cuDNN graph convolution result (27/18/12)");
  for (auto d : {pack, p, graph, op, conv, x, w, y}) CKD(cudnnBackendDestroyDescriptor(d));
  for (void* q : {static_cast<void*>(dx), static_cast<void*>(dw), static_cast<void*>(dy), workspace})
    if (q) CK(cudaFree(q));
  CKD(cudnnDestroy(h));
}

int main(int argc, char** argv) {
  bool fft = true, dnn = true;
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--no-fft") fft = false;
    if (std::string_view(argv[i]) == "--no-cudnn") dnn = false;
    if (std::string_view(argv[i]) == "--device" && i + 1 < argc) device = std::atoi(argv[++i]);
  }
  if (device != 0) CK(cudaSetDevice(device));  // (--device N: the libraries on a lease's later device)
  cublasChecks();
  cublasLtChecks();
  if (fft) cufftChecks();
  if (fft) capturedLibraryChecks();
  if (dnn) {
    cudnnChecks();
    cudnnGraphChecks();
  }
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "ALL PASSED", failures);
  return failures ? 1 : 0;
}
