// Stream capture across streams, and the capture API NCCL uses for collectives inside a CUDA graph: a
// stream forked into a capture by an event and joined back; a fork never joined back; the capture's graph
// and open dependencies (cudaStreamGetCaptureInfo), nodes added to the graph while it is captured, a
// stream's dependencies set (cudaStreamUpdateCaptureDependencies), and a user object handed to the graph.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "checks.h"
#include "increment.cuh"

namespace {

constexpr int kN = 256;
std::atomic<int> destroyed{0};
void CUDART_CB destroy(void*) { ++destroyed; }

unsigned first(const unsigned* d) {
  unsigned v = 0;
  CK(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

void increment(unsigned* p, cudaStream_t s) { gpool_test_increment<<<1, kN, 0, s>>>(p, kN); }

size_t count(cudaGraph_t g, bool roots) {
  size_t n = 0;
  if (roots) CK(cudaGraphGetRootNodes(g, nullptr, &n));
  else CK(cudaGraphGetNodes(g, nullptr, &n));
  return n;
}

// s1 joins s0's capture through an event, works beside it, and is joined back before the capture ends.
void forkAndJoin(cudaStream_t s0, cudaStream_t s1, unsigned* a, unsigned* b) {
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
  CK(cudaEventRecord(fork, s0));
  CK(cudaStreamWaitEvent(s1, fork, 0));
  cudaStreamCaptureStatus status;
  CK(cudaStreamIsCapturing(s1, &status));
  check(status == cudaStreamCaptureStatusActive, "a stream that waits on an event recorded in a capture joins it");
  increment(a, s1);
  increment(b, s0);
  CK(cudaEventRecord(join, s1));
  CK(cudaStreamWaitEvent(s0, join, 0));
  increment(a, s0);
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s0, &g));
  check(count(g, false) == 3 && count(g, true) == 2, "the forked work is a branch of its own: three nodes, two roots");
  size_t edges = 0;
  CK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
  check(edges == 2, "the join makes the last kernel follow both branches");
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphLaunch(exec, s0));
  CK(cudaStreamSynchronize(s0));
  check(first(a) == 2 && first(b) == 1, "the captured branches run when the graph does");
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));

  // A fork that never joins back: the capture cannot end well.
  CK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
  CK(cudaEventRecord(fork, s0));
  CK(cudaStreamWaitEvent(s1, fork, 0));
  increment(a, s1);
  cudaGraph_t unjoined = nullptr;
  cudaError_t e = cudaStreamEndCapture(s0, &unjoined);
  check(e == cudaErrorStreamCaptureUnjoined && unjoined == nullptr, "a capture with a stream not joined back fails: unjoined",
        cudaGetErrorName(e));
  cudaGetLastError();
  CK(cudaStreamIsCapturing(s1, &status));
  check(status == cudaStreamCaptureStatusNone, "the forked stream is out of the capture once it ended");
  for (cudaEvent_t ev : {fork, join}) CK(cudaEventDestroy(ev));
}

// As NCCL's strong streams do: a side stream brought into the capture with no dependencies, an event
// record node added to the graph after the side stream's work, the side stream set to follow that node,
// and a user object moved to the graph.
void asNcclDoes(cudaStream_t s0, cudaStream_t s1, unsigned* a, unsigned* b) {
  cudaEvent_t scratch, serial, join;
  for (cudaEvent_t* ev : {&scratch, &serial, &join}) CK(cudaEventCreateWithFlags(ev, cudaEventDisableTiming));
  CK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
  increment(a, s0);
  cudaStreamCaptureStatus status;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  size_t n = 0;
  CK(cudaStreamGetCaptureInfo(s0, &status, &id, &graph, &deps, nullptr, &n));
  check(status == cudaStreamCaptureStatusActive && graph != nullptr && n == 1,
        "cudaStreamGetCaptureInfo names the capture's graph and the node the stream's next work follows");
  cudaGraphNodeType type;
  CK(cudaGraphNodeGetType(deps[0], &type));
  check(type == cudaGraphNodeTypeKernel, "that node is the kernel just captured");

  CK(cudaEventRecord(scratch, s0));
  CK(cudaStreamWaitEvent(s1, scratch, 0));
  CK(cudaStreamUpdateCaptureDependencies(s1, nullptr, nullptr, 0, cudaStreamSetCaptureDependencies));
  increment(b, s1);  // a root now

  cudaGraphNode_t record;
  CK(cudaGraphAddEventRecordNode(&record, graph, nullptr, 0, serial));
  CK(cudaStreamGetCaptureInfo(s1, &status, nullptr, nullptr, &deps, nullptr, &n));
  check(n == 1, "the side stream's next work follows its kernel");
  std::vector<cudaGraphNode_t> side(deps, deps + n);
  for (cudaGraphNode_t d : side) CK(cudaGraphAddDependencies(graph, &d, &record, nullptr, 1));
  CK(cudaStreamUpdateCaptureDependencies(s1, &record, nullptr, 1, cudaStreamSetCaptureDependencies));
  CK(cudaStreamGetCaptureInfo(s1, &status, nullptr, nullptr, &deps, nullptr, &n));
  check(n == 1 && deps[0] == record, "cudaStreamUpdateCaptureDependencies sets what the stream follows");

  cudaUserObject_t obj;
  CK(cudaUserObjectCreate(&obj, nullptr, destroy, 1, cudaUserObjectNoDestructorSync));
  CK(cudaGraphRetainUserObject(graph, obj, 1, cudaGraphUserObjectMove));

  CK(cudaEventRecord(join, s1));
  CK(cudaStreamWaitEvent(s0, join, 0));
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s0, &g));
  check(g == graph, "the capture ends with the graph it named");
  check(count(g, false) == 3 && count(g, true) == 2, "two kernels and the event record node; two roots");
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphDestroy(g));
  CK(cudaGraphLaunch(exec, s0));
  CK(cudaStreamSynchronize(s0));
  check(first(a) == 3 && first(b) == 2, "both kernels ran");
  CK(cudaGraphExecDestroy(exec));
  for (int i = 0; i < 500 && destroyed == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  check(destroyed == 1, "the user object the graph held is destroyed with its instantiation");
  for (cudaEvent_t ev : {scratch, serial, join}) CK(cudaEventDestroy(ev));
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  unsigned *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, kN * sizeof(unsigned)));
  CK(cudaMalloc(&b, kN * sizeof(unsigned)));
  CK(cudaMemset(a, 0, kN * sizeof(unsigned)));
  CK(cudaMemset(b, 0, kN * sizeof(unsigned)));
  cudaStream_t s0, s1;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  forkAndJoin(s0, s1, a, b);
  asNcclDoes(s0, s1, a, b);
  for (cudaStream_t s : {s0, s1}) CK(cudaStreamDestroy(s));
  CK(cudaFree(a));
  CK(cudaFree(b));
  if (failures == 0) std::printf("ALL PASSED\n");
  return failures == 0 ? 0 : 1;
}
