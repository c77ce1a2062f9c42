// Host functions through gpool: cudaLaunchHostFunc and cudaStreamAddCallback run on the client, on a
// thread of their own, in stream order; work queued after one waits until it has returned; they run at
// every replay of a graph they were captured into.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "checks.h"

namespace {

struct Gate {
  std::promise<void> go;  // the main thread opens it once cudaLaunchHostFunc has returned
  std::atomic<int> done{0};
  std::thread::id ran_on;
};

void CUDART_CB gated(void* p) {
  auto* g = static_cast<Gate*>(p);
  g->ran_on = std::this_thread::get_id();
  g->go.get_future().wait();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a slow function: later work must wait for it
  g->done = 1;
}

std::mutex order_mu;
std::vector<int> order;
void CUDART_CB append(void* p) {
  std::lock_guard lock(order_mu);
  order.push_back(static_cast<int>(reinterpret_cast<intptr_t>(p)));
}

void CUDART_CB callback(cudaStream_t, cudaError_t status, void* p) {
  if (status == cudaSuccess) static_cast<std::atomic<int>*>(p)->fetch_add(1);
}

std::atomic<int> replays{0};
void CUDART_CB count(void*) { ++replays; }

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t after;
  CK(cudaEventCreate(&after));

  // The launch returns at once (the function waits for the main thread), and the event recorded after
  // the function completes only once the function has returned.
  Gate gate;
  CK(cudaLaunchHostFunc(s, gated, &gate));
  CK(cudaEventRecord(after, s));
  gate.go.set_value();
  CK(cudaEventSynchronize(after));
  check(gate.done == 1, "work queued after a host function waits until it has returned");
  check(gate.ran_on != std::this_thread::get_id(), "the host function ran on a thread of its own");

  // Several, in stream order.
  for (intptr_t i = 0; i < 5; ++i) CK(cudaLaunchHostFunc(s, append, reinterpret_cast<void*>(i)));
  CK(cudaStreamSynchronize(s));
  check(order == std::vector<int>{0, 1, 2, 3, 4}, "host functions run in stream order");

  std::atomic<int> calls{0};
  CK(cudaStreamAddCallback(s, callback, &calls, 0));
  CK(cudaStreamSynchronize(s));
  check(calls == 1, "cudaStreamAddCallback's callback ran with cudaSuccess");

  // Captured into a graph: the function runs at each replay, not at capture.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaLaunchHostFunc(s, count, nullptr));
  CK(cudaStreamEndCapture(s, &graph));
  check(replays == 0, "a captured host function does not run at capture");
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  check(replays == 2, "a captured host function runs at each replay");
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaEventDestroy(after));
  CK(cudaStreamDestroy(s));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
