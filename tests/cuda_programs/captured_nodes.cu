// The parameters of nodes a stream capture made, read back as a program that rewrites its captured graphs
// reads them (exllamav3's graphs, TensorRT-LLM): the graph's nodes and their types, then each kernel node's
// function, shape and argument values, a memset node's fill, a device-to-device memcpy node's ends, and an
// event node's event; a kernel node's arguments changed in the instantiation from what was read back; a
// driver-API launch of a module's function, whose node names that function. Values are checked, by
// running the graphs too.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "checks.h"
#include "increment.cuh"

// y = a x + y; launched here through the driver, as a module's function (sim: sim_kernels.cpp runs it).
extern "C" __global__ void gpool_test_saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

namespace {

const int kN = 300;  // two blocks of 256 threads, the second partly idle

// The graph's nodes of `type`, in the order the graph lists them.
std::vector<cudaGraphNode_t> nodesOf(cudaGraph_t g, cudaGraphNodeType type) {
  size_t count = 0;
  CK(cudaGraphGetNodes(g, nullptr, &count));
  std::vector<cudaGraphNode_t> all(count), out;
  CK(cudaGraphGetNodes(g, all.data(), &count));
  for (cudaGraphNode_t n : all) {
    cudaGraphNodeType t;
    CK(cudaGraphNodeGetType(n, &t));
    if (t == type) out.push_back(n);
  }
  return out;
}

void noop(void*) {}

unsigned at(const unsigned* d, int i) {
  unsigned v = 0;
  CK(cudaMemcpy(&v, d + i, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

// Captures: a memset of a, an increment of a (n words), a copy of a to b, an event recorded and waited on
// (external: nodes of their own), a host function; then reads every node's parameters back.
void readBack(cudaStream_t s, unsigned* a, unsigned* b, cudaEvent_t ev) {
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemsetAsync(a, 0x11, kN * sizeof(unsigned), s));
  gpool_test_increment<<<2, 256, 0, s>>>(a, kN);
  CK(cudaMemcpyAsync(b, a, kN * sizeof(unsigned), cudaMemcpyDeviceToDevice, s));
  CK(cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal));
  CK(cudaStreamWaitEvent(s, ev, cudaEventWaitExternal));
  CK(cudaLaunchHostFunc(s, noop, a));
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s, &g));

  auto kernels = nodesOf(g, cudaGraphNodeTypeKernel);
  CHECK(kernels.size() == 1, "the captured graph has one kernel node (%zu)", kernels.size());
  // A clone's copy of a captured node, found before either was read, reads back the same.
  if (kernels.size() == 1) {
    cudaGraph_t clone;
    CK(cudaGraphClone(&clone, g));
    cudaGraphNode_t copy = nullptr;
    cudaKernelNodeParams c{};
    cudaError_t e = cudaGraphNodeFindInClone(&copy, kernels[0], clone);
    if (e == cudaSuccess) e = cudaGraphKernelNodeGetParams(copy, &c);
    CHECK(e == cudaSuccess && c.func == reinterpret_cast<void*>(&gpool_test_increment) && c.gridDim.x == 2 && c.kernelParams &&
              *static_cast<int*>(c.kernelParams[1]) == kN,
          "a clone's copy of a captured kernel node reads back the same (%s)", cudaGetErrorName(e));
    CK(cudaGraphDestroy(clone));
  }

  if (kernels.size() == 1) {
    cudaKernelNodeParams p{};
    cudaError_t e = cudaGraphKernelNodeGetParams(kernels[0], &p);
    CHECK(e == cudaSuccess, "a captured kernel node's parameters read back (%s)", cudaGetErrorName(e));
    CHECK(p.func == reinterpret_cast<void*>(&gpool_test_increment), "its function is the kernel launched");
    const char* name = nullptr;
    cudaError_t ne = p.func ? cudaFuncGetName(&name, p.func) : cudaErrorInvalidDeviceFunction;
    CHECK(ne == cudaSuccess && name && std::strcmp(name, "gpool_test_increment") == 0, "which cudaFuncGetName names (%s)",
          name ? name : cudaGetErrorName(ne));
    CHECK(p.gridDim.x == 2 && p.gridDim.y == 1 && p.gridDim.z == 1 && p.blockDim.x == 256 && p.blockDim.y == 1 &&
              p.blockDim.z == 1 && p.sharedMemBytes == 0,
          "its shape is the launch's (grid %u, block %u, shared %u)", p.gridDim.x, p.blockDim.x, p.sharedMemBytes);
    bool args = p.kernelParams && *static_cast<unsigned**>(p.kernelParams[0]) == a &&
                *static_cast<int*>(p.kernelParams[1]) == kN;
    CHECK(args, "its arguments are the launch's");
  }

  auto memsets = nodesOf(g, cudaGraphNodeTypeMemset);
  CHECK(memsets.size() == 1, "one memset node (%zu)", memsets.size());
  if (memsets.size() == 1) {
    cudaMemsetParams m{};
    cudaError_t e = cudaGraphMemsetNodeGetParams(memsets[0], &m);
    CHECK(e == cudaSuccess, "a captured memset node's parameters read back (%s)", cudaGetErrorName(e));
    size_t bytes = size_t{m.width} * m.elementSize * m.height;
    CHECK(m.dst == a && bytes == kN * sizeof(unsigned) && (m.value & 0xff) == 0x11,
          "it fills a's %zu bytes with 0x11 (%zu bytes of %u-byte elements, value %#x)", kN * sizeof(unsigned), bytes,
          m.elementSize, m.value);
  }

  auto copies = nodesOf(g, cudaGraphNodeTypeMemcpy);
  CHECK(copies.size() == 1, "one memcpy node (%zu)", copies.size());
  if (copies.size() == 1) {
    cudaMemcpy3DParms c{};
    cudaError_t e = cudaGraphMemcpyNodeGetParams(copies[0], &c);
    CHECK(e == cudaSuccess, "a captured device-to-device memcpy node's parameters read back (%s)", cudaGetErrorName(e));
    size_t bytes = c.extent.width * c.extent.height * c.extent.depth;
    CHECK(c.srcPtr.ptr == a && c.dstPtr.ptr == b && bytes == kN * sizeof(unsigned),
          "it copies a's %zu bytes to b (%zu bytes)", kN * sizeof(unsigned), bytes);
  }

  auto records = nodesOf(g, cudaGraphNodeTypeEventRecord);
  CHECK(records.size() == 1, "one event record node (%zu)", records.size());
  if (records.size() == 1) {
    cudaEvent_t got = nullptr;
    cudaError_t e = cudaGraphEventRecordNodeGetEvent(records[0], &got);
    CHECK(e == cudaSuccess && got == ev, "a captured event record node names its event (%s)", cudaGetErrorName(e));
  }
  auto waits = nodesOf(g, cudaGraphNodeTypeWaitEvent);
  CHECK(waits.size() == 1, "one event wait node (%zu)", waits.size());
  if (waits.size() == 1) {
    cudaEvent_t got = nullptr;
    cudaError_t e = cudaGraphEventWaitNodeGetEvent(waits[0], &got);
    CHECK(e == cudaSuccess && got == ev, "a captured event wait node names its event (%s)", cudaGetErrorName(e));
  }
  auto hosts = nodesOf(g, cudaGraphNodeTypeHost);
  CHECK(hosts.size() == 1, "one host node (%zu)", hosts.size());
  if (hosts.size() == 1) {
    cudaHostNodeParams h{};
    cudaError_t e = cudaGraphHostNodeGetParams(hosts[0], &h);
    CHECK(e == cudaSuccess && h.fn == noop && h.userData == a, "a captured host function's node names it and its argument (%s)",
          cudaGetErrorName(e));
  }

  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  CHECK(at(a, 0) == 0x11111112 && at(b, kN - 1) == 0x11111112, "the graph ran as captured (%#x, %#x)", at(a, 0),
        at(b, kN - 1));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
}

// Captures an increment of a, reads its node's parameters, and points the instantiation's node at b
// instead (a launch's pointers rewritten without capturing again).
void rewrite(cudaStream_t s, unsigned* a, unsigned* b) {
  CK(cudaMemset(a, 0, kN * sizeof(unsigned)));
  CK(cudaMemset(b, 0, kN * sizeof(unsigned)));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  gpool_test_increment<<<2, 256, 0, s>>>(a, kN);
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s, &g));
  auto kernels = nodesOf(g, cudaGraphNodeTypeKernel);
  if (kernels.size() != 1) return check(false, "the rewritten graph has one kernel node");
  cudaKernelNodeParams p{};
  CK(cudaGraphKernelNodeGetParams(kernels[0], &p));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  unsigned* target = b;
  int n = kN - 1;
  void* args[] = {&target, &n};
  p.kernelParams = args;
  cudaError_t e = cudaGraphExecKernelNodeSetParams(exec, kernels[0], &p);
  CHECK(e == cudaSuccess, "the instantiation's node takes the parameters read back, with new arguments (%s)",
        cudaGetErrorName(e));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  CHECK(at(a, 0) == 0 && at(b, 0) == 2 && at(b, kN - 2) == 2 && at(b, kN - 1) == 0,
        "each launch incremented b's first %d words, not a (a[0] %u, b[0] %u, b[%d] %u)", kN - 1, at(a, 0), at(b, 0),
        kN - 1, at(b, kN - 1));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
}

// A module's function launched through the driver inside a capture: its node names that CUfunction.
void driverLaunch(cudaStream_t s) {
  auto kernelLibrary = driverEntryPoint<CUresult (*)(CUlibrary*, CUkernel)>("cuKernelGetLibrary", 12050);
  auto libraryModule = driverEntryPoint<CUresult (*)(CUmodule*, CUlibrary)>("cuLibraryGetModule", 12000);
  auto moduleFunction = driverEntryPoint<CUresult (*)(CUfunction*, CUmodule, const char*)>("cuModuleGetFunction", 2000);
  auto launch = driverEntryPoint<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                              CUstream, void**, void**)>("cuLaunchKernel", 4000);
  auto nodeParams = driverEntryPoint<CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*)>("cuGraphKernelNodeGetParams", 12000);
  cudaKernel_t kernel = nullptr;
  CK(cudaGetKernel(&kernel, gpool_test_saxpy));
  CUlibrary library = nullptr;
  CUmodule module = nullptr;
  CUfunction f = nullptr;
  if (kernelLibrary(&library, reinterpret_cast<CUkernel>(kernel)) != CUDA_SUCCESS || libraryModule(&module, library) != CUDA_SUCCESS ||
      moduleFunction(&f, module, "gpool_test_saxpy") != CUDA_SUCCESS)
    return check(false, "the saxpy module function is found");
  const int n = 64;
  float *x = nullptr, *y = nullptr;
  std::vector<float> ones(n, 1.0f);
  CK(cudaMalloc(&x, n * sizeof(float)));
  CK(cudaMalloc(&y, n * sizeof(float)));
  CK(cudaMemcpy(x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(y, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  int count = n;
  float a = 2.0f;
  void* args[] = {&count, &a, &x, &y};
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CUresult launched = launch(f, 1, 1, 1, n, 1, 1, 0, s, args, nullptr);
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s, &g));
  CHECK(launched == CUDA_SUCCESS, "a driver-API launch is captured (%d)", launched);
  auto kernels = nodesOf(g, cudaGraphNodeTypeKernel);
  CUDA_KERNEL_NODE_PARAMS p{};
  CUresult got = kernels.size() == 1 ? nodeParams(reinterpret_cast<CUgraphNode>(kernels[0]), &p) : CUDA_ERROR_INVALID_VALUE;
  CHECK(got == CUDA_SUCCESS && p.func == f && p.blockDimX == n && p.gridDimX == 1, "its node names the module's function (%d)", got);
  bool values = got == CUDA_SUCCESS && p.kernelParams && *static_cast<int*>(p.kernelParams[0]) == n &&
                *static_cast<float*>(p.kernelParams[1]) == 2.0f && *static_cast<float**>(p.kernelParams[2]) == x &&
                *static_cast<float**>(p.kernelParams[3]) == y;
  CHECK(values, "and the launch's arguments");
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  float last = 0;
  CK(cudaMemcpy(&last, y + n - 1, sizeof last, cudaMemcpyDeviceToHost));
  CHECK(last == 3.0f, "the graph ran it (y = 2x + y: %g)", last);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
  CK(cudaFree(x));
  CK(cudaFree(y));
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  unsigned *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, kN * sizeof(unsigned)));
  CK(cudaMalloc(&b, kN * sizeof(unsigned)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CK(cudaEventCreate(&ev));
  readBack(s, a, b, ev);
  rewrite(s, a, b);
  driverLaunch(s);
  CK(cudaEventDestroy(ev));
  CK(cudaStreamDestroy(s));
  CK(cudaFree(a));
  CK(cudaFree(b));
  if (failures == 0) std::printf("ALL PASSED\n");
  return failures == 0 ? 0 : 1;
}
