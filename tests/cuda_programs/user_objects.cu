// User objects through gpool: a destructor that runs once, on this machine, when the last reference goes,
// whoever held it: the program (cudaUserObjectRetain/Release), a graph (cudaGraphRetainUserObject, moved
// or new references), or an instantiation of the graph. The pattern NCCL uses for captured
// collectives: create with one reference, move it to the graph, destroy the graph once instantiated.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "checks.h"
#include "increment.cuh"

namespace {

std::atomic<int> destroyed[4];

void CUDART_CB destroy(void* which) { ++destroyed[reinterpret_cast<uintptr_t>(which)]; }

cudaUserObject_t make(uintptr_t which, unsigned refs) {
  cudaUserObject_t obj = nullptr;
  CK(cudaUserObjectCreate(&obj, reinterpret_cast<void*>(which), destroy, refs, cudaUserObjectNoDestructorSync));
  return obj;
}

// Destructors run asynchronously (cudaUserObjectNoDestructorSync): waits up to 5 s for `which` to have
// run `times` times, and says whether it has.
bool ranWithin(uintptr_t which, int times) {
  for (int i = 0; i < 500 && destroyed[which] < times; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return destroyed[which] == times;
}

// A short wait in which a destructor must not run.
bool stillAlive(uintptr_t which) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return destroyed[which] == 0;
}

cudaGraph_t oneKernelGraph(unsigned* d, int* n) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  void* args[] = {&d, n};
  cudaKernelNodeParams k{};
  k.func = reinterpret_cast<void*>(gpool_test_increment);
  k.gridDim = dim3(1);
  k.blockDim = dim3(64);
  k.kernelParams = args;
  cudaGraphNode_t node;
  CK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &k));
  return g;
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  unsigned* d = nullptr;
  int n = 64;
  CK(cudaMalloc(&d, n * sizeof(unsigned)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // The program's own references: two made, one more retained, three released.
  cudaUserObject_t a = make(0, 2);
  CK(cudaUserObjectRetain(a, 1));
  CK(cudaUserObjectRelease(a, 2));
  check(stillAlive(0), "a user object lives while the program holds a reference");
  CK(cudaUserObjectRelease(a, 1));
  check(ranWithin(0, 1), "its destructor runs, here, when the last reference goes");

  // As NCCL does: the reference moves to the graph; the instantiation keeps the object past the graph.
  cudaGraph_t g = oneKernelGraph(d, &n);
  cudaUserObject_t b = make(1, 1);
  CK(cudaGraphRetainUserObject(g, b, 1, cudaGraphUserObjectMove));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphDestroy(g));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  check(stillAlive(1), "an instantiation holds its graph's references after the graph is gone");
  CK(cudaGraphExecDestroy(exec));
  check(ranWithin(1, 1), "the destructor runs once the instantiation is destroyed");

  // New references for a graph (not moved): the program gives its own back first, then the graph some of
  // its own; destroying the graph drops the rest.
  cudaGraph_t g2 = oneKernelGraph(d, &n);
  cudaUserObject_t c = make(2, 1);
  CK(cudaGraphRetainUserObject(g2, c, 2, 0));
  CK(cudaUserObjectRelease(c, 1));
  CK(cudaGraphReleaseUserObject(g2, c, 1));
  check(stillAlive(2), "a graph's own references keep the object");
  CK(cudaGraphDestroy(g2));
  check(ranWithin(2, 1), "destroying the graph runs the destructor, once");

  CK(cudaFree(d));
  CK(cudaStreamDestroy(s));
  check(destroyed[0] == 1 && destroyed[1] == 1 && destroyed[2] == 1, "no destructor ran twice");
  if (failures == 0) std::printf("ALL PASSED\n");
  return failures == 0 ? 0 : 1;
}
