// CUDA graphs built node by node through gpool, as XLA's command buffers are: memset, kernel, child
// graph, device copy, host and event nodes with dependencies; kernel parameters changed in the graph and
// in an instantiation; cudaGraphExecUpdate; batch memory-operation nodes. Values are checked after each
// launch.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <vector>

#include "checks.h"
#include "increment.cuh"

namespace {

std::atomic<int> host_runs{0};
void CUDART_CB hostNode(void*) { ++host_runs; }
std::atomic<int> host2_runs{0};
void CUDART_CB hostNode2(void*) { ++host2_runs; }

cudaKernelNodeParams incrementParams(void** args) {
  cudaKernelNodeParams k{};
  k.func = reinterpret_cast<void*>(gpool_test_increment);
  k.gridDim = dim3(4);
  k.blockDim = dim3(256);
  k.kernelParams = args;
  return k;
}

bool allEqual(const std::vector<unsigned>& v, size_t from, size_t to, unsigned want) {
  for (size_t i = from; i < to; ++i)
    if (v[i] != want) return false;
  return true;
}

const char* resultText(CUresult) { return "CUresult"; }  // CHECK_STATUS prints the number

// The words a batch memory-operation node writes: a 32-bit one, then a 64-bit one.
struct Words {
  unsigned w32;
  unsigned pad;
  unsigned long long w64;
};

Words readWords(const Words* d) {
  Words w{};
  CK(cudaMemcpy(&w, d, sizeof w, cudaMemcpyDeviceToHost));
  return w;
}

// Runs `exec` once on `s` and says whether the words then hold `w32` and `w64`.
bool writes(cudaGraphExec_t exec, cudaStream_t s, Words* d, unsigned w32, unsigned long long w64) {
  CK(cudaMemset(d, 0, sizeof(Words)));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  Words w = readWords(d);
  return w.w32 == w32 && w.w64 == w64;
}

void setWrites(CUstreamBatchMemOpParams (&ops)[2], Words* d, unsigned w32, unsigned long long w64) {
  ops[0] = CUstreamBatchMemOpParams{};
  ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[0].writeValue.address = reinterpret_cast<CUdeviceptr>(&d->w32);
  ops[0].writeValue.value = w32;
  ops[1] = CUstreamBatchMemOpParams{};
  ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  ops[1].writeValue.address = reinterpret_cast<CUdeviceptr>(&d->w64);
  ops[1].writeValue.value64 = w64;
}

// A batch memory-operation node (the driver's cuGraphAddBatchMemOpNode; the runtime has no such call):
// writes a 32- and a 64-bit word at every launch; its getter returns its operations; new operations for
// an instantiation's node change that instantiation only, and for the graph's node, later instantiations.
void batchMemOpNodes(cudaStream_t s) {
  using Add = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const CUDA_BATCH_MEM_OP_NODE_PARAMS*);
  using Get = CUresult (*)(CUgraphNode, CUDA_BATCH_MEM_OP_NODE_PARAMS*);
  using Set = CUresult (*)(CUgraphNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS*);
  using ExecSet = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS*);
  using AddGeneric = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);
  using Current = CUresult (*)(CUcontext*);
  auto add = driverEntryPoint<Add>("cuGraphAddBatchMemOpNode");
  auto get = driverEntryPoint<Get>("cuGraphBatchMemOpNodeGetParams");
  auto set = driverEntryPoint<Set>("cuGraphBatchMemOpNodeSetParams");
  auto execSet = driverEntryPoint<ExecSet>("cuGraphExecBatchMemOpNodeSetParams");
  auto addGeneric = driverEntryPoint<AddGeneric>("cuGraphAddNode", 12020);  // CUDA 12.2's, without edge data
  CUcontext ctx = nullptr;
  CHECK_STATUS(driverEntryPoint<Current>("cuCtxGetCurrent")(&ctx), CUDA_SUCCESS, resultText);

  Words* d = nullptr;
  CK(cudaMalloc(&d, sizeof(Words)));
  CUstreamBatchMemOpParams ops[2];
  setWrites(ops, d, 0x1234u, 0x1122334455667788ull);
  CUDA_BATCH_MEM_OP_NODE_PARAMS p{ctx, 2, ops, 0};
  cudaGraph_t graph;
  CK(cudaGraphCreate(&graph, 0));
  CUgraphNode node = nullptr;
  CHECK_STATUS(add(&node, graph, nullptr, 0, &p), CUDA_SUCCESS, resultText);
  CUDA_BATCH_MEM_OP_NODE_PARAMS got{};
  CHECK_STATUS(get(node, &got), CUDA_SUCCESS, resultText);
  check(got.count == 2 && got.paramArray && got.paramArray != ops && got.paramArray[1].writeValue.value64 == 0x1122334455667788ull,
        "cuGraphBatchMemOpNodeGetParams returns the node's own copy of its operations");
  using GetType = CUresult (*)(CUgraphNode, CUgraphNodeType*);  // the runtime's enum has no such type
  CUgraphNodeType type;
  CHECK_STATUS(driverEntryPoint<GetType>("cuGraphNodeGetType")(node, &type), CUDA_SUCCESS, resultText);
  check(type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, "the node is a batch memory-operation node");

  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  check(writes(exec, s, d, 0x1234u, 0x1122334455667788ull), "a batch memory-operation node writes its words at a launch");
  setWrites(ops, d, 0x5678u, 42ull);
  CHECK_STATUS(execSet(exec, node, &p), CUDA_SUCCESS, resultText);
  check(writes(exec, s, d, 0x5678u, 42ull), "cuGraphExecBatchMemOpNodeSetParams changes the instantiation's node");
  setWrites(ops, d, 7u, 8ull);
  CHECK_STATUS(set(node, &p), CUDA_SUCCESS, resultText);
  cudaGraphExec_t later;
  CK(cudaGraphInstantiate(&later, graph, 0));
  check(writes(exec, s, d, 0x5678u, 42ull) && writes(later, s, d, 7u, 8ull),
        "cuGraphBatchMemOpNodeSetParams changes later instantiations, not earlier ones");
  CHECK_STATUS(get(node, &got), CUDA_SUCCESS, resultText);
  check(got.paramArray[0].writeValue.value == 7u, "the getter returns the new operations");

  cudaGraph_t generic;
  CK(cudaGraphCreate(&generic, 0));
  CUgraphNodeParams gp{};
  gp.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
  gp.memOp = CUDA_BATCH_MEM_OP_NODE_PARAMS_v2{ctx, 2, ops, 0};
  CHECK_STATUS(addGeneric(&node, generic, nullptr, 0, &gp), CUDA_SUCCESS, resultText);
  cudaGraphExec_t gexec;
  CK(cudaGraphInstantiate(&gexec, generic, 0));
  check(writes(gexec, s, d, 7u, 8ull), "cuGraphAddNode makes a batch memory-operation node too");

  for (cudaGraphExec_t e : {exec, later, gexec}) CK(cudaGraphExecDestroy(e));
  CK(cudaGraphDestroy(graph));
  CK(cudaGraphDestroy(generic));
  CK(cudaFree(d));
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  const int n = 1024;
  unsigned *d = nullptr, *out = nullptr;
  CK(cudaMalloc(&d, n * sizeof(unsigned)));
  CK(cudaMalloc(&out, n * sizeof(unsigned)));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t done;
  CK(cudaEventCreate(&done));

  // The child graph: one increment.
  int count = n;
  void* args[] = {&d, &count};
  cudaGraph_t child, graph;
  CK(cudaGraphCreate(&child, 0));
  cudaGraphNode_t child_kernel;
  cudaKernelNodeParams k = incrementParams(args);
  CK(cudaGraphAddKernelNode(&child_kernel, child, nullptr, 0, &k));

  // memset(5) -> increment -> child (increment) -> copy to out -> host; an event record after the copy.
  CK(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t memset, kernel, sub, copy, host, record, join;
  cudaMemsetParams m{};
  m.dst = d;
  m.value = 5;
  m.elementSize = 4;
  m.width = n;
  m.height = 1;
  CK(cudaGraphAddMemsetNode(&memset, graph, nullptr, 0, &m));
  CK(cudaGraphAddKernelNode(&kernel, graph, &memset, 1, &k));
  CK(cudaGraphAddChildGraphNode(&sub, graph, &kernel, 1, child));
  CK(cudaGraphAddMemcpyNode1D(&copy, graph, &sub, 1, out, d, n * sizeof(unsigned), cudaMemcpyDeviceToDevice));
  cudaHostNodeParams h{hostNode, nullptr};
  CK(cudaGraphAddHostNode(&host, graph, &copy, 1, &h));
  CK(cudaGraphAddEventRecordNode(&record, graph, &copy, 1, done));
  CK(cudaGraphAddEmptyNode(&join, graph, nullptr, 0));
  cudaGraphNode_t from[] = {host, record}, to[] = {join, join};
  CK(cudaGraphAddDependencies(graph, from, to, nullptr, 2));
  size_t nodes = 0;
  CK(cudaGraphGetNodes(graph, nullptr, &nodes));
  check(nodes == 7, "the graph has the seven nodes added");
  cudaGraphNodeType type;
  CK(cudaGraphNodeGetType(kernel, &type));
  check(type == cudaGraphNodeTypeKernel, "a kernel node's type");

  // A node of another graph is not a dependency of this one.
  cudaGraphNode_t stray;
  check(cudaGraphAddEmptyNode(&stray, graph, &child_kernel, 1) != cudaSuccess, "another graph's node is refused as a dependency");
  cudaGetLastError();

  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<unsigned> back(n);
  CK(cudaGraphLaunch(exec, s));
  CK(cudaEventSynchronize(done));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(back.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  check(allEqual(back, 0, n, 7), "memset, kernel, child graph and copy ran in order (5 + 1 + 1)");
  check(host_runs == 1, "the host node ran once");

  // New kernel parameters in the instantiation only: the first kernel covers half.
  int half = n / 2;
  void* half_args[] = {&d, &half};
  cudaKernelNodeParams kh = incrementParams(half_args);
  CK(cudaGraphExecKernelNodeSetParams(exec, kernel, &kh));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(back.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  check(allEqual(back, 0, half, 7) && allEqual(back, half, n, 6), "cudaGraphExecKernelNodeSetParams changed the instantiation");

  // The graph itself still has the full kernel; cudaGraphExecUpdate brings the instantiation back to it.
  cudaKernelNodeParams got{};
  CK(cudaGraphKernelNodeGetParams(kernel, &got));
  check(got.gridDim.x == 4 && got.blockDim.x == 256 && got.kernelParams && *static_cast<int*>(got.kernelParams[1]) == n,
        "cudaGraphKernelNodeGetParams reads the graph's parameters");
  cudaGraphExecUpdateResultInfo info{};
  CK(cudaGraphExecUpdate(exec, graph, &info));
  check(info.result == cudaGraphExecUpdateSuccess, "cudaGraphExecUpdate succeeds for the same topology");
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(back.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  check(allEqual(back, 0, n, 7) && host_runs == 3, "after the update the whole buffer is incremented again");

  // Changing the graph's kernel node, then instantiating anew.
  CK(cudaGraphKernelNodeSetParams(kernel, &kh));
  cudaGraphExec_t exec2;
  CK(cudaGraphInstantiate(&exec2, graph, 0));
  CK(cudaGraphLaunch(exec2, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(back.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  check(allEqual(back, 0, half, 7) && allEqual(back, half, n, 6), "cudaGraphKernelNodeSetParams changed the graph");

  // New memset value and host function for one instantiation's nodes.
  cudaMemsetParams m9 = m;
  m9.value = 9;
  CK(cudaGraphExecMemsetNodeSetParams(exec2, memset, &m9));
  cudaHostNodeParams h2{hostNode2, nullptr};
  CK(cudaGraphExecHostNodeSetParams(exec2, host, &h2));
  CK(cudaGraphLaunch(exec2, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(back.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  check(allEqual(back, 0, half, 11) && allEqual(back, half, n, 10), "cudaGraphExecMemsetNodeSetParams changed the memset value");
  check(host2_runs == 1 && host_runs == 4, "cudaGraphExecHostNodeSetParams changed the host function");

  batchMemOpNodes(s);

  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphExecDestroy(exec2));
  CK(cudaGraphDestroy(graph));
  CK(cudaGraphDestroy(child));
  CK(cudaEventDestroy(done));
  CK(cudaStreamDestroy(s));
  CK(cudaFree(d));
  CK(cudaFree(out));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
