// CUDA graphs beyond plain construction, as XLA's command buffers use them: conditional nodes (WHILE, IF
// with an else body, SWITCH) whose condition a kernel sets; the graph's shape asked back (nodes, roots,
// edges, a node's dependencies and dependents) and edges removed; clones and a node found in a clone;
// node parameters set and read back on the graph; an instantiation's nodes switched off, its child graph
// and event nodes given new parameters; cuGraphExecGetFlags and the DOT print. Values are checked.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cctype>
#include <string>
#include <vector>

#include "checks.h"
#include "increment.cuh"

// A loop's condition: counts its iterations and keeps the loop going while fewer than `limit` ran.
extern "C" __global__ void gpool_test_loop_condition(cudaGraphConditionalHandle h, unsigned* counter, unsigned limit) {
  unsigned ran = ++*counter;
  cudaGraphSetConditional(h, ran < limit ? 1 : 0);
}

extern "C" __global__ void gpool_test_set_condition(cudaGraphConditionalHandle h, unsigned value) {
  cudaGraphSetConditional(h, value);
}

namespace {

const int n = 256;

cudaKernelNodeParams kernelParams(void* func, void** args) {
  cudaKernelNodeParams k{};
  k.func = func;
  k.gridDim = dim3(1);
  k.blockDim = dim3(n);
  k.kernelParams = args;
  return k;
}

std::vector<unsigned> readBack(const unsigned* d) {
  std::vector<unsigned> host(n);
  CK(cudaMemcpy(host.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  return host;
}

void launchAndWait(cudaGraphExec_t exec, cudaStream_t s) {
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
}

// Launches with the condition-setting kernel node's argument changed in the instantiation first.
void launchWithValue(cudaGraphExec_t exec, cudaGraphNode_t set, const cudaKernelNodeParams& k, cudaStream_t s) {
  CK(cudaGraphExecKernelNodeSetParams(exec, set, &k));
  launchAndWait(exec, s);
}

bool allAre(const std::vector<unsigned>& v, unsigned want) {
  return std::all_of(v.begin(), v.end(), [want](unsigned x) { return x == want; });
}

// Instantiates `g`, launches it once and says whether every element of d is then `want`.
bool launchOnceGives(cudaGraph_t g, cudaStream_t s, const unsigned* d, unsigned want) {
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  launchAndWait(exec, s);
  bool ok = allAre(readBack(d), want);
  CK(cudaGraphExecDestroy(exec));
  return ok;
}

cudaGraphNode_t addIncrement(cudaGraph_t g, unsigned** d, const cudaGraphNode_t* deps, size_t ndeps) {
  static int count = n;
  void* args[] = {d, &count};
  cudaKernelNodeParams k = kernelParams(reinterpret_cast<void*>(gpool_test_increment), args);
  cudaGraphNode_t node;
  CK(cudaGraphAddKernelNode(&node, g, deps, ndeps, &k));
  return node;
}

cudaGraphNode_t addConditional(cudaGraph_t g, cudaGraphConditionalHandle h, cudaGraphConditionalNodeType type, unsigned size,
                               const cudaGraphNode_t* deps, size_t ndeps, cudaGraph_t* bodies) {
  cudaGraphNodeParams p{};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = h;
  p.conditional.type = type;
  p.conditional.size = size;
  cudaGraphNode_t node;
  CK(cudaGraphAddNode(&node, g, deps, nullptr, ndeps, &p));
  for (unsigned i = 0; i < size; ++i) bodies[i] = p.conditional.phGraph_out[i];
  return node;
}

// WHILE: the body increments and then asks whether to go on; it runs exactly `limit` times per launch.
void whileLoop(unsigned* d, unsigned* counter, cudaStream_t s) {
  cudaGraph_t g, body;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle h;
  CK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
  cudaGraphNode_t loop = addConditional(g, h, cudaGraphCondTypeWhile, 1, nullptr, 0, &body);
  cudaGraphNode_t inc = addIncrement(body, &d, nullptr, 0);
  unsigned limit = 5;
  void* args[] = {&h, &counter, &limit};
  cudaKernelNodeParams k = kernelParams(reinterpret_cast<void*>(gpool_test_loop_condition), args);
  k.blockDim = dim3(1);
  cudaGraphNode_t cond;
  CK(cudaGraphAddKernelNode(&cond, body, &inc, 1, &k));
  (void)loop;
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  for (int launch = 1; launch <= 2; ++launch) {
    CK(cudaMemsetAsync(counter, 0, sizeof(unsigned), s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    unsigned ran = 0;
    CK(cudaMemcpy(&ran, counter, sizeof ran, cudaMemcpyDeviceToHost));
    CHECK(ran == limit, "a WHILE node ran its body %u times (want %u)", ran, limit);
    CHECK(allAre(readBack(d), limit * launch), "a WHILE node's body incremented %u times per launch", limit);
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
  std::printf("conditional WHILE: %u iterations per launch\n", limit);
}

// IF with an else body, chosen by a kernel that runs first; then SWITCH over three bodies.
void ifElseAndSwitch(unsigned* d, cudaStream_t s) {
  CK(cudaMemset(d, 0, n * sizeof(unsigned)));
  cudaGraph_t g, branches[2];
  CK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle h;
  CK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
  unsigned value = 0;
  void* args[] = {&h, &value};
  cudaKernelNodeParams k = kernelParams(reinterpret_cast<void*>(gpool_test_set_condition), args);
  k.blockDim = dim3(1);
  cudaGraphNode_t set;
  CK(cudaGraphAddKernelNode(&set, g, nullptr, 0, &k));
  addConditional(g, h, cudaGraphCondTypeIf, 2, &set, 1, branches);
  addIncrement(branches[0], &d, nullptr, 0);  // then: +1
  cudaGraphNode_t twice = addIncrement(branches[1], &d, nullptr, 0);  // else: +2
  addIncrement(branches[1], &d, &twice, 1);
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  launchAndWait(exec, s);  // condition 0: else
  CHECK(allAre(readBack(d), 2), "an IF node with a false condition ran its else body");
  value = 1;
  launchWithValue(exec, set, k, s);
  CHECK(allAre(readBack(d), 3), "an IF node with a true condition ran its then body");
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));

  // SWITCH: body i adds i+1; the value 2 picks the third, and 7 (out of range) none.
  CK(cudaMemset(d, 0, n * sizeof(unsigned)));
  cudaGraph_t sw, cases[3];
  CK(cudaGraphCreate(&sw, 0));
  CK(cudaGraphConditionalHandleCreate(&h, sw, 0, 0));
  value = 2;
  CK(cudaGraphAddKernelNode(&set, sw, nullptr, 0, &k));
  addConditional(sw, h, cudaGraphCondTypeSwitch, 3, &set, 1, cases);
  for (int c = 0; c < 3; ++c) {
    cudaGraphNode_t last = nullptr;
    for (int i = 0; i <= c; ++i) last = addIncrement(cases[c], &d, last ? &last : nullptr, last ? 1 : 0);
  }
  CK(cudaGraphInstantiate(&exec, sw, 0));
  launchAndWait(exec, s);
  CHECK(allAre(readBack(d), 3), "a SWITCH node with value 2 ran its third body once");
  value = 7;
  launchWithValue(exec, set, k, s);
  CHECK(allAre(readBack(d), 3), "a SWITCH node with an out-of-range value ran no body");
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(sw));
  std::printf("conditional IF/else and SWITCH: bodies chosen by the kernel's value\n");
}

bool contains(const std::vector<cudaGraphNode_t>& v, cudaGraphNode_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// a -> b, a -> c, b -> d, c -> d: the shape asked back, an edge removed, a clone and its node.
void shapeAndClone(unsigned* d, cudaStream_t s) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t a, b, c, e;
  CK(cudaGraphAddEmptyNode(&a, g, nullptr, 0));
  b = addIncrement(g, &d, &a, 1);
  cudaMemsetParams m{};
  m.dst = d;
  m.value = 9;
  m.elementSize = 4;
  m.width = n;
  m.height = 1;
  CK(cudaGraphAddMemsetNode(&c, g, &a, 1, &m));
  cudaGraphNode_t bc[] = {b, c};
  CK(cudaGraphAddEmptyNode(&e, g, bc, 2));

  size_t count = 0;
  CK(cudaGraphGetNodes(g, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count + 2);
  count = nodes.size();
  CK(cudaGraphGetNodes(g, nodes.data(), &count));
  CHECK(count == 4 && nodes[4] == nullptr && contains(nodes, a) && contains(nodes, b) && contains(nodes, c) && contains(nodes, e),
        "cudaGraphGetNodes listed %zu nodes (want the 4 added, the rest cleared)", count);
  size_t roots = 2;
  cudaGraphNode_t root[2] = {};
  CK(cudaGraphGetRootNodes(g, root, &roots));
  CHECK(roots == 1 && root[0] == a && root[1] == nullptr, "cudaGraphGetRootNodes found %zu root (want a)", roots);
  size_t edges = 0;
  CK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
  CHECK(edges == 4, "cudaGraphGetEdges counted %zu edges (want 4)", edges);
  std::vector<cudaGraphNode_t> deps(4);
  size_t ndeps = deps.size();
  CK(cudaGraphNodeGetDependencies(e, deps.data(), nullptr, &ndeps));
  CHECK(ndeps == 2 && contains(deps, b) && contains(deps, c), "node e has %zu dependencies (want b and c)", ndeps);
  size_t ndependents = 0;
  CK(cudaGraphNodeGetDependentNodes(a, nullptr, nullptr, &ndependents));
  CHECK(ndependents == 2, "node a has %zu dependents (want 2)", ndependents);
  cudaGraphNodeType type;
  CK(cudaGraphNodeGetType(c, &type));
  CHECK(type == cudaGraphNodeTypeMemset, "a memset node reports type %d (want memset)", static_cast<int>(type));

  // The memset node's parameters, set on the graph and read back; then b runs after it, not beside it.
  cudaMemsetParams back{};
  CK(cudaGraphMemsetNodeGetParams(c, &back));
  CHECK(back.value == 9 && back.width == n, "cudaGraphMemsetNodeGetParams gave value %u (want 9)", back.value);
  m.value = 40;
  CK(cudaGraphMemsetNodeSetParams(c, &m));
  cudaGraphNode_t from[] = {a}, to[] = {b};
  CK(cudaGraphRemoveDependencies(g, from, to, nullptr, 1));
  CK(cudaGraphAddDependencies(g, &c, &b, nullptr, 1));
  CK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
  CHECK(edges == 4, "after moving an edge the graph has %zu edges (want 4)", edges);

  cudaGraph_t clone;
  CK(cudaGraphClone(&clone, g));
  cudaGraphNode_t cloned_c;
  CK(cudaGraphNodeFindInClone(&cloned_c, c, clone));
  CHECK(cloned_c != c, "cudaGraphNodeFindInClone returned the clone's own node");
  CK(cudaGraphMemsetNodeGetParams(cloned_c, &back));
  CHECK(back.value == 40, "the clone's memset node has value %u (want 40)", back.value);
  CK(cudaGraphDestroy(g));  // the clone is a graph of its own

  cudaGraphExec_t exec;
  CK(cudaGraphInstantiateWithFlags(&exec, clone, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  unsigned long long flags = 0;
  CK(cudaGraphExecGetFlags(exec, &flags));
  CHECK(flags == cudaGraphInstantiateFlagAutoFreeOnLaunch, "cudaGraphExecGetFlags gave %llu (want auto-free-on-launch)", flags);
  launchAndWait(exec, s);
  CHECK(allAre(readBack(d), 41), "the clone ran memset(40) then the increment");

  // The instantiation's memset switched off: only the increment runs.
  unsigned on = 1;
  CK(cudaGraphNodeSetEnabled(exec, cloned_c, 0));
  CK(cudaGraphNodeGetEnabled(exec, cloned_c, &on));
  CHECK(on == 0, "a node switched off reports enabled=%u (want 0)", on);
  launchAndWait(exec, s);
  CHECK(allAre(readBack(d), 42), "a disabled memset node did not run");

  const char* dot = "/tmp/gpool_graph_nodes_test.dot";
  CK(cudaGraphDebugDotPrint(clone, dot, 0));
  // The whole file, in lower case: NVIDIA's driver writes long labels, its own way (its first run on an
  // H200 failed a check of the first 4 KiB for "memset").
  FILE* f = std::fopen(dot, "r");
  std::string text;
  for (int c; f && (c = std::fgetc(f)) != EOF;) text += static_cast<char>(std::tolower(c));
  if (f) std::fclose(f);
  std::remove(dot);
  CHECK(text.find("digraph") != std::string::npos && text.find("memset") != std::string::npos && text.find("->") != std::string::npos,
        "cudaGraphDebugDotPrint wrote the nodes and edges (%zu bytes)", text.size());
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(clone));
  std::printf("graph shape: nodes, roots, edges, dependencies; clone, enable, DOT print\n");
}

// An instantiation's child graph node takes a new child of the same shape; its event record node a new event.
void execChildAndEvent(unsigned* d, cudaStream_t s) {
  CK(cudaMemset(d, 0, n * sizeof(unsigned)));
  cudaGraph_t child1, child2, g;
  CK(cudaGraphCreate(&child1, 0));
  addIncrement(child1, &d, nullptr, 0);
  // The new child must have the same nodes of the same types (NVIDIA's driver refuses a memset in a
  // kernel's place): the same kernel, on another buffer.
  unsigned* other = nullptr;
  CK(cudaMalloc(&other, n * sizeof(unsigned)));
  CK(cudaMemset(other, 0, n * sizeof(unsigned)));
  CK(cudaGraphCreate(&child2, 0));
  addIncrement(child2, &other, nullptr, 0);
  cudaGraph_t another_type;
  CK(cudaGraphCreate(&another_type, 0));
  cudaMemsetParams m{};
  m.dst = d;
  m.value = 70;
  m.elementSize = 4;
  m.width = n;
  m.height = 1;
  cudaGraphNode_t ms;
  CK(cudaGraphAddMemsetNode(&ms, another_type, nullptr, 0, &m));
  cudaEvent_t first, second;
  CK(cudaEventCreate(&first));
  CK(cudaEventCreate(&second));
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t sub, rec;
  CK(cudaGraphAddChildGraphNode(&sub, g, nullptr, 0, child1));
  CK(cudaGraphAddEventRecordNode(&rec, g, &sub, 1, first));
  cudaEvent_t got = nullptr;
  CK(cudaGraphEventRecordNodeGetEvent(rec, &got));
  CHECK(got == first, "cudaGraphEventRecordNodeGetEvent returned the node's event");
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  launchAndWait(exec, s);
  CHECK(allAre(readBack(d), 1), "the child graph incremented");
  float elapsed = 0;  // elapsed time needs both events recorded: only `first` is, so far
  CHECK(cudaEventElapsedTime(&elapsed, first, second) != cudaSuccess, "the event record node recorded its own event alone");
  (void)cudaGetLastError();

  CHECK(cudaGraphExecChildGraphNodeSetParams(exec, sub, another_type) == cudaErrorGraphExecUpdateFailure,
        "a child whose node is of another type is refused");
  (void)cudaGetLastError();
  // Same shape (one kernel node), other work: the child now increments `other`. The record node now records `second`.
  CK(cudaGraphExecChildGraphNodeSetParams(exec, sub, child2));
  CK(cudaGraphExecEventRecordNodeSetEvent(exec, rec, second));
  launchAndWait(exec, s);
  CHECK(allAre(readBack(d), 1) && allAre(readBack(other), 1), "the instantiation's child graph node took the new child");
  CHECK(cudaEventElapsedTime(&elapsed, first, second) == cudaSuccess && elapsed >= 0, "the instantiation's record node recorded the new event");
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
  CK(cudaGraphDestroy(child1));
  CK(cudaGraphDestroy(child2));
  CK(cudaGraphDestroy(another_type));
  CK(cudaFree(other));
  CK(cudaEventDestroy(first));
  CK(cudaEventDestroy(second));
  std::printf("instantiation setters: child graph and event nodes\n");
}

// A child node embeds a copy of its graph; the copy is the node's to change, the original stays as it was.
void embeddedChild(unsigned* d, cudaStream_t s) {
  CK(cudaMemset(d, 0, n * sizeof(unsigned)));
  cudaGraph_t child, g, embedded = nullptr;
  CK(cudaGraphCreate(&child, 0));
  cudaGraphNode_t inc = addIncrement(child, &d, nullptr, 0);
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t sub;
  CK(cudaGraphAddChildGraphNode(&sub, g, nullptr, 0, child));
  CK(cudaGraphChildGraphNodeGetGraph(sub, &embedded));
  size_t in_embedded = 0, in_child = 0;
  CK(cudaGraphGetNodes(embedded, nullptr, &in_embedded));
  CHECK(embedded != child && in_embedded == 1, "a child node embeds a copy of its graph (%zu node)", in_embedded);
  cudaGraphNode_t first = nullptr;
  size_t one = 1;
  CK(cudaGraphGetNodes(embedded, &first, &one));
  addIncrement(embedded, &d, &first, 1);
  CK(cudaGraphGetNodes(child, nullptr, &in_child));
  CHECK(in_child == 1, "changing the embedded copy leaves the original graph alone (%zu node)", in_child);
  (void)inc;
  CHECK(launchOnceGives(g, s, d, 2), "the child node runs its embedded graph as changed (+2)");
  CK(cudaGraphDestroy(g));
  CK(cudaGraphDestroy(child));
  std::printf("child graph node: its embedded graph\n");
}

// A kernel node's launch attributes: set, read back, and copied onto another kernel node.
void kernelAttributes(unsigned* d) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t a = addIncrement(g, &d, nullptr, 0), b = addIncrement(g, &d, &a, 1);
  cudaLaunchAttributeValue v{};
  v.priority = 3;
  CK(cudaGraphKernelNodeSetAttribute(a, cudaLaunchAttributePriority, &v));
  v = cudaLaunchAttributeValue{};
  v.clusterDim.x = 2;
  v.clusterDim.y = v.clusterDim.z = 1;
  CK(cudaGraphKernelNodeSetAttribute(a, cudaLaunchAttributeClusterDimension, &v));
  cudaLaunchAttributeValue back{};
  CK(cudaGraphKernelNodeGetAttribute(a, cudaLaunchAttributePriority, &back));
  CHECK(back.priority == 3, "a kernel node's priority attribute reads back (%d, want 3)", back.priority);
  CK(cudaGraphKernelNodeCopyAttributes(b, a));
  back = cudaLaunchAttributeValue{};
  CK(cudaGraphKernelNodeGetAttribute(b, cudaLaunchAttributeClusterDimension, &back));
  CHECK(back.clusterDim.x == 2 && back.clusterDim.y == 1, "copied attributes reach the other node (cluster x %u, want 2)", back.clusterDim.x);
  cudaGraphNode_t empty;
  CK(cudaGraphAddEmptyNode(&empty, g, nullptr, 0));
  CHECK(cudaGraphKernelNodeSetAttribute(empty, cudaLaunchAttributePriority, &v) != cudaSuccess, "an empty node takes no kernel attribute");
  (void)cudaGetLastError();
  CK(cudaGraphDestroy(g));
  std::printf("kernel node attributes\n");
}

// Capture into graphs that exist (XLA traces library calls into its command buffers so): after a node of
// a graph, and into an IF node's body.
void captureToGraph(unsigned* d, cudaStream_t s) {
  CK(cudaMemset(d, 0, n * sizeof(unsigned)));
  cudaGraph_t g, body;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t first;
  CK(cudaGraphAddEmptyNode(&first, g, nullptr, 0));
  cudaGraphConditionalHandle h;
  CK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));  // true at each launch
  cudaGraphNode_t cond = addConditional(g, h, cudaGraphCondTypeIf, 1, &first, 1, &body);
  int count = n;
  void* args[] = {&d, &count};
  CK(cudaStreamBeginCaptureToGraph(s, g, &cond, nullptr, 1, cudaStreamCaptureModeGlobal));
  CK(cudaLaunchKernel(reinterpret_cast<void*>(gpool_test_increment), dim3(1), dim3(n), args, 0, s));
  cudaGraph_t captured = nullptr;
  CK(cudaStreamEndCapture(s, &captured));
  CHECK(captured == g, "a capture into a graph hands back that graph");
  CK(cudaStreamBeginCaptureToGraph(s, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
  CK(cudaLaunchKernel(reinterpret_cast<void*>(gpool_test_increment), dim3(1), dim3(n), args, 0, s));
  CK(cudaStreamEndCapture(s, &captured));
  CHECK(captured == body, "a capture into a conditional body hands back the body");
  CK(cudaStreamBeginCaptureToGraph(s, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
  CK(cudaLaunchKernel(reinterpret_cast<void*>(gpool_test_increment), dim3(1), dim3(n), args, 0, s));
  // No graph to hand back asked for (NVIDIA's graphConditionalNodes ends its body captures this way).
  CK(cudaStreamEndCapture(s, nullptr));
  size_t count_g = 0, count_body = 0;
  CK(cudaGraphGetNodes(g, nullptr, &count_g));
  CK(cudaGraphGetNodes(body, nullptr, &count_body));
  CHECK(count_g == 3 && count_body == 2, "captured nodes joined the graphs (%zu and %zu nodes, want 3 and 2)", count_g, count_body);
  CHECK(launchOnceGives(g, s, d, 3), "the graph ran the body's captured work (+2), then its own (+1)");
  CK(cudaGraphDestroy(g));
  std::printf("capture into an existing graph and into a conditional body\n");
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  unsigned *d = nullptr, *counter = nullptr;
  CK(cudaMalloc(&d, n * sizeof(unsigned)));
  CK(cudaMalloc(&counter, sizeof(unsigned)));
  CK(cudaMemset(d, 0, n * sizeof(unsigned)));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  whileLoop(d, counter, s);
  ifElseAndSwitch(d, s);
  shapeAndClone(d, s);
  execChildAndEvent(d, s);
  captureToGraph(d, s);
  embeddedChild(d, s);
  kernelAttributes(d);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(d));
  CK(cudaFree(counter));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
