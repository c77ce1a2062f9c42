// More of NVIDIA's libraries, unmodified, through gpool: cuRAND's host generators, cuSPARSE's generic SpMV,
// cuSOLVER's dense Cholesky and LU solves, and Thrust and CUB (sort, reduce, scan), as programs beyond
// the basics use them. As in libraries.cu, on the sim backend kernels are recorded, not computed, so
// results are compared only when GPOOL_TEST_EXPECT_COMPUTE=1 (natively, or through gpool on a GPU); every
// library call's status is checked either way. Prints one line per check; exits 1 on failure.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>
#include <curand.h>
#include <cusolverDn.h>
#include <cusparse.h>
#include <thrust/device_vector.h>
#include <thrust/reduce.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <vector>

#include "checks.h"

static const char* curandText(curandStatus_t) { return "curandStatus_t"; }
static const char* cusolverText(cusolverStatus_t) { return "cusolverStatus_t"; }

#define CKR(call) CHECK_STATUS(call, CURAND_STATUS_SUCCESS, curandText)
#define CKS(call) CHECK_STATUS(call, CUSPARSE_STATUS_SUCCESS, cusparseGetErrorString)
#define CKL(call) CHECK_STATUS(call, CUSOLVER_STATUS_SUCCESS, cusolverText)

// Uniform floats from two generators seeded alike are the same sequence, each in (0, 1]; a normal
// sequence of 2^16 has a mean near its own.
static void curandChecks() {
  const size_t n = 1 << 16;
  float* d = nullptr;
  CK(cudaMalloc(&d, 2 * n * sizeof(float)));
  std::vector<float> first(n), second(n);
  for (float* out : {d, d + n}) {
    curandGenerator_t g;
    CKR(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    CKR(curandSetPseudoRandomGeneratorSeed(g, 1234));
    CKR(curandGenerateUniform(g, out, n));
    CKR(curandDestroyGenerator(g));
  }
  CK(cudaMemcpy(first.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(second.data(), d + n, n * sizeof(float), cudaMemcpyDeviceToHost));
  check(true, "curandGenerateUniform 65536 issued twice with one seed");
  const bool in_range = std::all_of(first.begin(), first.end(), [](float x) { return x > 0.0f && x <= 1.0f; });
  checkComputed(first == second && in_range, "curand: one seed, one sequence, within (0, 1]");

  curandGenerator_t g;
  CKR(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_XORWOW));
  CKR(curandSetPseudoRandomGeneratorSeed(g, 42));
  CKR(curandGenerateNormal(g, d, n, 3.0f, 0.5f));
  CKR(curandDestroyGenerator(g));
  CK(cudaMemcpy(first.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  const double mean = std::accumulate(first.begin(), first.end(), 0.0) / n;
  check(true, "curandGenerateNormal 65536 (xorwow) issued");
  checkComputed(std::fabs(mean - 3.0) < 0.02, "curand normal sequence's mean is near 3.0");
  CK(cudaFree(d));
}

// y = A x for a tridiagonal A (2 on the diagonal, -1 beside it) in CSR, x all ones: y is 1 at both ends
// and 0 between.
static void cusparseChecks() {
  const int n = 1000;
  std::vector<int> rows{0}, cols;
  std::vector<float> vals;
  for (int i = 0; i < n; ++i) {
    for (int j = std::max(0, i - 1); j <= std::min(n - 1, i + 1); ++j) {
      cols.push_back(j);
      vals.push_back(i == j ? 2.0f : -1.0f);
    }
    rows.push_back(static_cast<int>(cols.size()));
  }
  const int nnz = static_cast<int>(vals.size());
  int *d_rows, *d_cols;
  float *d_vals, *d_x, *d_y;
  CK(cudaMalloc(&d_rows, rows.size() * sizeof(int)));
  CK(cudaMalloc(&d_cols, cols.size() * sizeof(int)));
  CK(cudaMalloc(&d_vals, vals.size() * sizeof(float)));
  CK(cudaMalloc(&d_x, n * sizeof(float)));
  CK(cudaMalloc(&d_y, n * sizeof(float)));
  CK(cudaMemcpy(d_rows, rows.data(), rows.size() * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_cols, cols.data(), cols.size() * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_vals, vals.data(), vals.size() * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<float> ones(n, 1.0f), y(n, -7.0f);
  CK(cudaMemcpy(d_x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));

  cusparseHandle_t h;
  CKS(cusparseCreate(&h));
  cusparseSpMatDescr_t a;
  cusparseDnVecDescr_t x, yv;
  CKS(cusparseCreateCsr(&a, n, n, nnz, d_rows, d_cols, d_vals, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                        CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  CKS(cusparseCreateDnVec(&x, n, d_x, CUDA_R_32F));
  CKS(cusparseCreateDnVec(&yv, n, d_y, CUDA_R_32F));
  const float one = 1.0f, zero = 0.0f;
  size_t bytes = 0;
  CKS(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, x, &zero, yv, CUDA_R_32F,
                              CUSPARSE_SPMV_ALG_DEFAULT, &bytes));
  void* buffer = nullptr;
  if (bytes) CK(cudaMalloc(&buffer, bytes));
  CKS(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, x, &zero, yv, CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT,
                   buffer));
  CK(cudaMemcpy(y.data(), d_y, n * sizeof(float), cudaMemcpyDeviceToHost));
  check(true, "cusparseSpMV CSR 1000x1000 tridiagonal issued and copied back");
  bool ok = y[0] == 1.0f && y[n - 1] == 1.0f;
  for (int i = 1; i < n - 1; ++i) ok = ok && y[i] == 0.0f;
  checkComputed(ok, "cusparseSpMV result (1, 0, ..., 0, 1)");
  CKS(cusparseDestroySpMat(a));
  CKS(cusparseDestroyDnVec(x));
  CKS(cusparseDestroyDnVec(yv));
  CKS(cusparseDestroy(h));
  for (void* p : {static_cast<void*>(d_rows), static_cast<void*>(d_cols), static_cast<void*>(d_vals),
                  static_cast<void*>(d_x), static_cast<void*>(d_y), buffer})
    if (p) CK(cudaFree(p));
}

// A = M^T M + n I (symmetric positive definite), b = A * [1, 2, ..., n]: Cholesky (potrf/potrs) and LU
// (getrf/getrs) both solve back to [1, 2, ..., n].
static void cusolverChecks() {
  const int n = 32;
  std::vector<double> m(n * n), a(n * n, 0.0), want(n), b(n, 0.0);
  for (int i = 0; i < n * n; ++i) m[i] = ((i * 7919) % 23) / 23.0 - 0.5;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      for (int k = 0; k < n; ++k) a[i + j * n] += m[k + i * n] * m[k + j * n];
      if (i == j) a[i + j * n] += n;
    }
  std::iota(want.begin(), want.end(), 1.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) b[i] += a[i + j * n] * want[j];

  cusolverDnHandle_t h;
  CKL(cusolverDnCreate(&h));
  double *d_a, *d_b, *work;
  int *d_info, *d_pivots;
  CK(cudaMalloc(&d_a, a.size() * sizeof(double)));
  CK(cudaMalloc(&d_b, b.size() * sizeof(double)));
  CK(cudaMalloc(&d_info, sizeof(int)));
  CK(cudaMalloc(&d_pivots, n * sizeof(int)));
  int lwork_chol = 0, lwork_lu = 0;
  CKL(cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, d_a, n, &lwork_chol));
  CKL(cusolverDnDgetrf_bufferSize(h, n, n, d_a, n, &lwork_lu));
  CK(cudaMalloc(&work, std::max(lwork_chol, lwork_lu) * sizeof(double)));

  const auto solve = [&](bool cholesky) {
    std::vector<double> x(n, 0.0);
    int info = -1;
    CK(cudaMemcpy(d_a, a.data(), a.size() * sizeof(double), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_b, b.data(), b.size() * sizeof(double), cudaMemcpyHostToDevice));
    if (cholesky) {
      CKL(cusolverDnDpotrf(h, CUBLAS_FILL_MODE_LOWER, n, d_a, n, work, lwork_chol, d_info));
      CKL(cusolverDnDpotrs(h, CUBLAS_FILL_MODE_LOWER, n, 1, d_a, n, d_b, n, d_info));
    } else {
      CKL(cusolverDnDgetrf(h, n, n, d_a, n, work, d_pivots, d_info));
      CKL(cusolverDnDgetrs(h, CUBLAS_OP_N, n, 1, d_a, n, d_pivots, d_b, n, d_info));
    }
    CK(cudaMemcpy(&info, d_info, sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(x.data(), d_b, n * sizeof(double), cudaMemcpyDeviceToHost));
    bool near = info == 0;
    for (int i = 0; i < n; ++i) near = near && std::fabs(x[i] - want[i]) < 1e-9 * want[i];
    return near;
  };
  const bool chol = solve(true);
  check(true, "cusolverDnDpotrf + potrs 32x32 issued and copied back");
  checkComputed(chol, "cusolver Cholesky solves back to 1..32");
  const bool lu = solve(false);
  check(true, "cusolverDnDgetrf + getrs 32x32 issued and copied back");
  checkComputed(lu, "cusolver LU solves back to 1..32");
  for (void* p : {static_cast<void*>(d_a), static_cast<void*>(d_b), static_cast<void*>(d_info),
                  static_cast<void*>(d_pivots), static_cast<void*>(work)})
    CK(cudaFree(p));
  CKL(cusolverDnDestroy(h));
}

struct Square {
  __host__ __device__ long long operator()(int v) const { return static_cast<long long>(v) * v; }
};

// Thrust over device vectors: a descending sequence sorted, squares summed (sum of k^2 for k < n).
static void thrustChecks() {
  const int n = 100000;
  thrust::device_vector<int> v(n);
  thrust::sequence(v.begin(), v.end(), n - 1, -1);
  thrust::sort(v.begin(), v.end());
  thrust::device_vector<long long> squares(n);
  thrust::transform(v.begin(), v.end(), squares.begin(), Square{});
  const long long sum = thrust::reduce(squares.begin(), squares.end(), 0LL);
  std::vector<int> host(n);
  thrust::copy(v.begin(), v.end(), host.begin());
  CK(cudaGetLastError());
  check(true, "thrust sequence, sort, transform and reduce over 100000 ints");
  const long long k = n - 1;
  checkComputed(std::is_sorted(host.begin(), host.end()) && host.front() == 0 && host.back() == k,
              "thrust::sort orders 0..99999");
  checkComputed(sum == k * (k + 1) * (2 * k + 1) / 6, "thrust::reduce sums the squares");
}

// CUB's device-wide algorithms as libraries call them: ask for temporary storage, then run, on a stream.
static void cubChecks() {
  const int n = 1 << 15;
  std::vector<unsigned> keys(n);
  for (int i = 0; i < n; ++i) keys[i] = (static_cast<unsigned>(i) * 2654435761u) >> 8;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  unsigned *in, *out;
  CK(cudaMalloc(&in, n * sizeof(unsigned)));
  CK(cudaMalloc(&out, n * sizeof(unsigned)));
  CK(cudaMemcpyAsync(in, keys.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice, s));
  size_t sort_bytes = 0, scan_bytes = 0;
  CK(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes, in, out, n, 0, 32, s));
  CK(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, in, in, n, s));
  void* temp = nullptr;
  CK(cudaMalloc(&temp, std::max(sort_bytes, scan_bytes)));
  CK(cub::DeviceRadixSort::SortKeys(temp, sort_bytes, in, out, n, 0, 32, s));
  std::vector<unsigned> sorted(n), sums(n);
  CK(cudaMemcpyAsync(sorted.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
  std::vector<unsigned> ones(n, 1u);
  CK(cudaMemcpyAsync(in, ones.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice, s));
  CK(cub::DeviceScan::InclusiveSum(temp, scan_bytes, in, in, n, s));
  CK(cudaMemcpyAsync(sums.data(), in, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  check(true, "cub DeviceRadixSort and DeviceScan on a stream");
  std::vector<unsigned> want = keys;
  std::sort(want.begin(), want.end());
  checkComputed(sorted == want, "cub::DeviceRadixSort::SortKeys matches std::sort");
  bool counts = true;
  for (int i = 0; i < n; ++i) counts = counts && sums[i] == static_cast<unsigned>(i + 1);
  checkComputed(counts, "cub::DeviceScan::InclusiveSum of ones counts 1..n");
  for (void* p : {static_cast<void*>(in), static_cast<void*>(out), temp}) CK(cudaFree(p));
  CK(cudaStreamDestroy(s));
}

int main() {
  curandChecks();
  cusparseChecks();
  cusolverChecks();
  thrustChecks();
  cubChecks();
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
