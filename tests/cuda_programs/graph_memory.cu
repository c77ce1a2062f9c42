// Graph memory through gpool: allocation and free nodes added explicitly (as NVIDIA's graphMemoryNodes
// sample and XLA's command buffers do) and made by capturing cudaMallocAsync/cudaFreeAsync (PyTorch's
// cudaMallocAsync backend under CUDA graphs); an allocation freed by another graph or outside any graph;
// the device's graph-memory figures and trim; and the lease's cap on what graphs reserve (CI runs it on a
// 64 MiB sim device; scripts/gpu_check.sh natively and through gpool on a GPU, check by check).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "checks.h"
#include "increment.cuh"

namespace {

constexpr int kN = 1024;
constexpr size_t kBytes = kN * sizeof(unsigned);

bool allEqual(const std::vector<unsigned>& v, unsigned want) {
  for (unsigned x : v)
    if (x != want) return false;
  return true;
}

std::vector<unsigned> fetch(const unsigned* d) {
  std::vector<unsigned> h(kN);
  CK(cudaMemcpy(h.data(), d, kBytes, cudaMemcpyDeviceToHost));
  return h;
}

cudaMemAllocNodeParams allocParams(size_t bytes) {
  cudaMemAllocNodeParams p{};
  p.poolProps.allocType = cudaMemAllocationTypePinned;
  p.poolProps.location.type = cudaMemLocationTypeDevice;
  p.poolProps.location.id = 0;
  p.bytesize = bytes;
  return p;
}

uint64_t graphAttribute(cudaGraphMemAttributeType a) {
  uint64_t v = 0;
  CK(cudaDeviceGetGraphMemAttribute(0, a, &v));
  return v;
}

size_t freeMemory() {
  size_t free = 0, total = 0;
  CK(cudaMemGetInfo(&free, &total));
  return free;
}

// alloc -> memset(5) -> increment -> copy to `out` -> free, launched twice; the graph is destroyed once
// instantiated, as the sample does.
void explicitNodes(cudaStream_t s, unsigned* out) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t alloc, set, inc, copy, free_node;
  cudaMemAllocNodeParams p = allocParams(kBytes);
  CK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &p));
  unsigned* a = static_cast<unsigned*>(p.dptr);
  check(a != nullptr, "an allocation node has its address when it is made");
  cudaMemsetParams m{};
  m.dst = a;
  m.value = 5;
  m.elementSize = 4;
  m.width = kN;
  m.height = 1;
  CK(cudaGraphAddMemsetNode(&set, g, &alloc, 1, &m));
  int n = kN;
  void* args[] = {&a, &n};
  cudaKernelNodeParams k{};
  k.func = reinterpret_cast<void*>(gpool_test_increment);
  k.gridDim = dim3(4);
  k.blockDim = dim3(256);
  k.kernelParams = args;
  CK(cudaGraphAddKernelNode(&inc, g, &set, 1, &k));
  CK(cudaGraphAddMemcpyNode1D(&copy, g, &inc, 1, out, a, kBytes, cudaMemcpyDeviceToDevice));
  CK(cudaGraphAddMemFreeNode(&free_node, g, &copy, 1, a));

  cudaMemAllocNodeParams back{};
  CK(cudaGraphMemAllocNodeGetParams(alloc, &back));
  check(back.dptr == a && back.bytesize == kBytes, "cudaGraphMemAllocNodeGetParams returns the node's address and size");
  void* freed = nullptr;
  CK(cudaGraphMemFreeNodeGetParams(free_node, &freed));
  check(freed == a, "cudaGraphMemFreeNodeGetParams returns the allocation it frees");

  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphDestroy(g));  // the instantiation holds the nodes
  for (int round = 0; round < 2; ++round) {
    CK(cudaMemsetAsync(out, 0, kBytes, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    check(allEqual(fetch(out), 6), round ? "a second launch allocates and frees again, with the same result"
                                         : "allocate, set, increment, copy and free in one graph");
  }
  check(graphAttribute(cudaGraphMemAttrUsedMemCurrent) == 0, "nothing is in use once the graph freed what it allocated");
  check(graphAttribute(cudaGraphMemAttrReservedMemCurrent) >= kBytes, "the device keeps the graph's memory in reserve");
  CK(cudaGraphExecDestroy(exec));
}

// One graph allocates and leaves the memory live; the program uses it outside any graph; a second graph
// frees it.
void allocatedHereFreedThere(cudaStream_t s) {
  cudaGraph_t g1, g2;
  CK(cudaGraphCreate(&g1, 0));
  cudaGraphNode_t alloc, free_node;
  cudaMemAllocNodeParams p = allocParams(kBytes);
  CK(cudaGraphAddMemAllocNode(&alloc, g1, nullptr, 0, &p));
  cudaGraphExec_t e1, e2;
  CK(cudaGraphInstantiate(&e1, g1, 0));
  CK(cudaGraphLaunch(e1, s));
  CK(cudaStreamSynchronize(s));
  check(graphAttribute(cudaGraphMemAttrUsedMemCurrent) >= kBytes, "a graph allocation not freed by its graph stays in use");
  unsigned* a = static_cast<unsigned*>(p.dptr);
  std::vector<unsigned> h(kN, 41);
  CK(cudaMemcpy(a, h.data(), kBytes, cudaMemcpyHostToDevice));
  check(allEqual(fetch(a), 41), "the program copies to and from a live graph allocation");

  CK(cudaGraphCreate(&g2, 0));
  CK(cudaGraphAddMemFreeNode(&free_node, g2, nullptr, 0, a));
  CK(cudaGraphInstantiate(&e2, g2, 0));
  CK(cudaGraphLaunch(e2, s));
  CK(cudaStreamSynchronize(s));
  check(graphAttribute(cudaGraphMemAttrUsedMemCurrent) == 0, "another graph's free node frees it");

  CK(cudaGraphLaunch(e1, s));  // allocated again; freed outside any graph this time
  CK(cudaFreeAsync(a, s));
  CK(cudaStreamSynchronize(s));
  check(graphAttribute(cudaGraphMemAttrUsedMemCurrent) == 0, "cudaFreeAsync frees a graph allocation");
  for (cudaGraphExec_t e : {e1, e2}) CK(cudaGraphExecDestroy(e));
  for (cudaGraph_t g : {g1, g2}) CK(cudaGraphDestroy(g));
}

// cudaMallocAsync and cudaFreeAsync inside a capture become the graph's allocation and free nodes.
void captured(cudaStream_t s, unsigned* out) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  unsigned* a = nullptr;
  CK(cudaMallocAsync(reinterpret_cast<void**>(&a), kBytes, s));
  CK(cudaMemsetAsync(a, 0, kBytes, s));
  gpool_test_increment<<<4, 256, 0, s>>>(a, kN);
  gpool_test_increment<<<4, 256, 0, s>>>(a, kN);
  CK(cudaMemcpyAsync(out, a, kBytes, cudaMemcpyDeviceToDevice, s));
  CK(cudaFreeAsync(a, s));
  CK(cudaStreamEndCapture(s, &g));

  size_t count = 0;
  CK(cudaGraphGetNodes(g, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CK(cudaGraphGetNodes(g, nodes.data(), &count));
  int allocs = 0, frees = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t;
    CK(cudaGraphNodeGetType(node, &t));
    if (t == cudaGraphNodeTypeMemAlloc) {
      ++allocs;
      cudaMemAllocNodeParams p{};
      CK(cudaGraphMemAllocNodeGetParams(node, &p));
      check(p.dptr == a && p.bytesize == kBytes, "a captured allocation node names the address cudaMallocAsync returned");
    }
    frees += t == cudaGraphNodeTypeMemFree;
  }
  check(allocs == 1 && frees == 1, "the capture holds one allocation node and one free node");

  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  for (int round = 0; round < 3; ++round) {
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    check(allEqual(fetch(out), 2), "a captured graph allocates, increments twice, copies out and frees");
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
}

// The reserve counts against the lease: with all but 20 MiB of it taken, a launch that allocates 40 MiB
// fails (as natively, where the GPU's memory is what runs out), and trimming gives the memory back.
void cappedByTheLease(cudaStream_t s) {
  CK(cudaDeviceGraphMemTrim(0));
  check(graphAttribute(cudaGraphMemAttrReservedMemCurrent) == 0, "a trim with nothing in use empties the reserve");
  const size_t big = 40u << 20;
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t alloc, free_node;
  cudaMemAllocNodeParams p = allocParams(big);
  CK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &p));
  CK(cudaGraphAddMemFreeNode(&free_node, g, &alloc, 1, p.dptr));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));

  void* hog = nullptr;
  CK(cudaMalloc(&hog, freeMemory() - (20u << 20)));
  cudaError_t e = cudaGraphLaunch(exec, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  check(e == cudaErrorMemoryAllocation, "a launch whose allocations do not fit under the lease's cap fails: out of memory",
        cudaGetErrorName(e));
  cudaGetLastError();
  CK(cudaFree(hog));

  const size_t before = freeMemory();
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  const size_t during = freeMemory();
  check(before - during >= big, "what the graph keeps in reserve is the lease's: cudaMemGetInfo shows it taken");
  CK(cudaDeviceGraphMemTrim(0));
  check(freeMemory() + (2u << 20) >= before, "cudaDeviceGraphMemTrim gives it back");
  uint64_t high = graphAttribute(cudaGraphMemAttrReservedMemHigh);
  check(high >= big, "the reserve's high watermark saw the launch");
  uint64_t zero = 0;
  CK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &zero));
  check(graphAttribute(cudaGraphMemAttrReservedMemHigh) < high, "the high watermark resets");
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned* out = nullptr;
  CK(cudaMalloc(&out, kBytes));
  explicitNodes(s, out);
  allocatedHereFreedThere(s);
  captured(s, out);
  cappedByTheLease(s);
  CK(cudaFree(out));
  CK(cudaStreamDestroy(s));
  if (failures == 0) std::printf("ALL PASSED\n");
  return failures == 0 ? 0 : 1;
}
