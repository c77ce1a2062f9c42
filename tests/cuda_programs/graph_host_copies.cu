// Copies between host memory and the device inside a stream capture, as NVIDIA's simpleCudaGraphs,
// jacobiCudaGraphs and conjugateGradientCudaGraphs make them: at every replay of the graph, a host-to-device
// copy reads the host memory as it is then, and a device-to-host copy writes it (page-locked memory, a
// std::vector, a variable on the stack; 1D and 2D). A copy on a stream that is not capturing, issued while
// another stream captures, runs at once. A graph built node by node copies between host memory and the
// device the same way (cudaGraphAddMemcpyNode, as the samples' manual graphs do). Prints one line per check
// and ALL PASSED.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "checks.h"
#include "increment.cuh"

namespace {

constexpr int kN = 1024;
constexpr size_t kBytes = kN * sizeof(unsigned);

bool holds(const unsigned* v, unsigned base) {
  for (int i = 0; i < kN; ++i)
    if (v[i] != base + static_cast<unsigned>(i)) return false;
  return true;
}

// pinned -> device, +1, device -> a vector and the last word -> a variable on the stack, replayed 3 times.
void oneDimensional(cudaStream_t s, unsigned* d) {
  unsigned* pinned = nullptr;
  CK(cudaMallocHost(&pinned, kBytes));
  for (int i = 0; i < kN; ++i) pinned[i] = 7;
  std::vector<unsigned> out(kN, 0);
  unsigned last = 0;

  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemcpyAsync(d, pinned, kBytes, cudaMemcpyHostToDevice, s));
  gpool_test_increment<<<kN / 256, 256, 0, s>>>(d, kN);
  CK(cudaMemcpyAsync(out.data(), d, kBytes, cudaMemcpyDeviceToHost, s));
  CK(cudaMemcpyAsync(&last, d + kN - 1, sizeof last, cudaMemcpyDefault, s));
  CK(cudaStreamEndCapture(s, &graph));
  check(out[0] == 0 && last == 0, "captured copies do not run at capture");
  size_t nodes = 0;
  CK(cudaGraphGetNodes(graph, nullptr, &nodes));
  char detail[64];
  std::snprintf(detail, sizeof detail, "%zu nodes", nodes);
  check(nodes >= 4, "the graph holds the copies and the kernel", detail);

  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (unsigned round = 0; round < 3; ++round) {
    for (int i = 0; i < kN; ++i) pinned[i] = 1000u * round + i;
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    std::snprintf(detail, sizeof detail, "round %u: out[1] %u, last %u", round, out[1], last);
    check(holds(out.data(), 1000u * round + 1) && last == 1000u * round + kN, "a replay reads the host input as it is and writes the outputs", detail);
  }
  CK(cudaGraphExecDestroy(exec));

  // A clone replays the same copies, after the graph it was cloned from is gone (simpleCudaGraphs clones).
  cudaGraph_t clone;
  CK(cudaGraphClone(&clone, graph));
  CK(cudaGraphDestroy(graph));
  CK(cudaGraphInstantiate(&exec, clone, 0));
  CK(cudaGraphDestroy(clone));  // the instantiation holds what it needs
  for (int i = 0; i < kN; ++i) pinned[i] = 7000u + i;
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  std::snprintf(detail, sizeof detail, "out[1] %u, last %u", out[1], last);
  check(holds(out.data(), 7001u) && last == 7000u + kN, "a clone's instantiation replays the copies after both graphs are gone", detail);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaFreeHost(pinned));
}

// Rows of a pageable host matrix (pitch 2 rows' width) -> pitched device memory -> rows of another.
void twoDimensional(cudaStream_t s) {
  constexpr size_t kWidth = 64 * sizeof(unsigned), kRows = 16, kHostPitch = 2 * kWidth;
  unsigned* d = nullptr;
  size_t pitch = 0;
  CK(cudaMallocPitch(&d, &pitch, kWidth, kRows));
  std::vector<unsigned> in(kHostPitch / sizeof(unsigned) * kRows), out(in.size(), 0);
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemcpy2DAsync(d, pitch, in.data(), kHostPitch, kWidth, kRows, cudaMemcpyHostToDevice, s));
  CK(cudaMemcpy2DAsync(out.data(), kHostPitch, d, pitch, kWidth, kRows, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (unsigned round = 0; round < 2; ++round) {
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned>(i * 3 + round);
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    bool ok = true;
    for (size_t y = 0; y < kRows; ++y)
      for (size_t x = 0; x < kHostPitch / sizeof(unsigned); ++x) {
        size_t i = y * kHostPitch / sizeof(unsigned) + x;
        ok &= out[i] == (x < kWidth / sizeof(unsigned) ? in[i] : 0u);
      }
    char detail[32];
    std::snprintf(detail, sizeof detail, "round %u", round);
    check(ok, "captured 2D copies between pageable host rows and pitched device memory", detail);
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaFree(d));
}

// 24 MiB each way, far more than the host-function channel's rings hold (1 MiB over shared memory):
// the rows stream through them at every replay.
void largeCopies(cudaStream_t s) {
  constexpr size_t kWords = size_t{6} << 20;
  std::vector<unsigned> in(kWords), out(kWords, 0);
  unsigned* big = nullptr;
  CK(cudaMalloc(&big, kWords * sizeof(unsigned)));
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemcpyAsync(big, in.data(), kWords * sizeof(unsigned), cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(out.data(), big, kWords * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (unsigned round = 0; round < 2; ++round) {
    for (size_t i = 0; i < kWords; ++i) in[i] = static_cast<unsigned>(i * 7 + round);
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    char detail[32];
    std::snprintf(detail, sizeof detail, "round %u", round);
    check(out == in, "24 MiB captured copies each way, replayed", detail);
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaFree(big));
}

// While `s` captures (relaxed mode), a copy on stream `t`, which does not capture, runs at once.
void besideACapture(cudaStream_t s, cudaStream_t t, unsigned* d) {
  std::vector<unsigned> in(kN), out(kN, 0);
  for (int i = 0; i < kN; ++i) in[i] = 5000u + i;
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  gpool_test_increment<<<kN / 256, 256, 0, s>>>(d, kN);
  CK(cudaMemcpyAsync(d, in.data(), kBytes, cudaMemcpyHostToDevice, t));
  CK(cudaMemcpyAsync(out.data(), d, kBytes, cudaMemcpyDeviceToHost, t));
  CK(cudaStreamSynchronize(t));
  CK(cudaStreamEndCapture(s, &graph));
  check(holds(out.data(), 5000u), "copies on a stream that does not capture run while another stream captures");
  CK(cudaGraphDestroy(graph));
}

// host -> device, +1, device -> host as nodes of a graph built by hand, launched twice.
void builtByHand(cudaStream_t s, unsigned* d) {
  std::vector<unsigned> in(kN), out(kN, 0);
  cudaGraph_t graph;
  CK(cudaGraphCreate(&graph, 0));
  cudaMemcpy3DParms to{};
  to.srcPtr = make_cudaPitchedPtr(in.data(), kBytes, kN, 1);
  to.dstPtr = make_cudaPitchedPtr(d, kBytes, kN, 1);
  to.extent = make_cudaExtent(kBytes, 1, 1);
  to.kind = cudaMemcpyHostToDevice;
  cudaGraphNode_t copy_in, kernel, copy_out;
  CK(cudaGraphAddMemcpyNode(&copy_in, graph, nullptr, 0, &to));
  int n = kN;
  void* args[] = {&d, &n};
  cudaKernelNodeParams k{};
  k.func = reinterpret_cast<void*>(gpool_test_increment);
  k.gridDim = dim3(kN / 256);
  k.blockDim = dim3(256);
  k.kernelParams = args;
  CK(cudaGraphAddKernelNode(&kernel, graph, &copy_in, 1, &k));
  cudaMemcpy3DParms from{};
  from.srcPtr = make_cudaPitchedPtr(d, kBytes, kN, 1);
  from.dstPtr = make_cudaPitchedPtr(out.data(), kBytes, kN, 1);
  from.extent = make_cudaExtent(kBytes, 1, 1);
  from.kind = cudaMemcpyDeviceToHost;
  CK(cudaGraphAddMemcpyNode(&copy_out, graph, &kernel, 1, &from));
  cudaGraphNodeType type;
  CK(cudaGraphNodeGetType(copy_in, &type));
  check(type == cudaGraphNodeTypeMemcpy, "a node that copies host memory is a memcpy node");
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (unsigned round = 0; round < 2; ++round) {
    for (int i = 0; i < kN; ++i) in[i] = 9000u * (round + 1) + i;
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    char detail[48];
    std::snprintf(detail, sizeof detail, "round %u: out[1] %u", round, out[1]);
    check(holds(out.data(), 9000u * (round + 1) + 1), "a graph built by hand copies host memory in and out at each launch", detail);
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
}

}  // namespace

int main() {
  cudaStream_t s, t;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  unsigned* d = nullptr;
  CK(cudaMalloc(&d, kBytes));
  oneDimensional(s, d);
  twoDimensional(s);
  largeCopies(s);
  besideACapture(s, t, d);
  builtByHand(s, d);
  CK(cudaFree(d));
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(t));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
