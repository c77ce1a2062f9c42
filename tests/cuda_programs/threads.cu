// Many host threads using one device at once, as data loaders, inference servers and multi-stream
// programs do: each thread has its own stream and memory and runs copies, launches, allocations, event
// records and queries in a loop, while threads hand each other their results through events (a stream of
// one thread waits for an event another recorded). gpool_test_increment runs on every backend (sim runs it
// by name), so every value is checked. Prints one line per check; exits 1 on failure.
#include <cuda_runtime.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "checks.h"
#include "increment.cuh"

namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 100;
constexpr int kWords = 4096;

// Where each thread leaves its round's event and how far it got, for the next thread to wait on.
struct Relay {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> round = std::vector<int>(kThreads, -1);
  std::vector<cudaEvent_t> event = std::vector<cudaEvent_t>(kThreads, nullptr);
  std::vector<unsigned*> data = std::vector<unsigned*>(kThreads, nullptr);
};

std::atomic<int> wrong{0};
std::atomic<int> failed_calls{0};

// Stops this thread at a failed call, and lets the threads that wait for it go on (they stop too).
#define TCK(call)                                                                                   \
  do {                                                                                              \
    cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess) {                                                                        \
      std::printf("FAIL  thread %d: %s: %s\n", id, #call, cudaGetErrorName(e_));                    \
      ++failed_calls;                                                                               \
      relay.cv.notify_all();                                                                        \
      return;                                                                                       \
    }                                                                                               \
  } while (0)

// One thread's work: round r adds r + 1 to each word of its buffer (r + 1 launches), copies it back and
// checks it, then copies the previous thread's buffer as of that thread's round r, after its event.
void work(int id, Relay& relay) {
  TCK(cudaSetDevice(0));
  cudaStream_t s;
  TCK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned *mine = nullptr, *theirs = nullptr;
  TCK(cudaMalloc(&mine, kWords * sizeof(unsigned)));
  TCK(cudaMalloc(&theirs, kWords * sizeof(unsigned)));
  TCK(cudaMemsetAsync(mine, 0, kWords * sizeof(unsigned), s));
  std::vector<unsigned> host(kWords);
  unsigned expected = 0;
  for (int r = 0; r < kRounds; ++r) {
    for (int k = 0; k <= r; ++k) gpool_test_increment<<<kWords / 256, 256, 0, s>>>(mine, kWords);
    TCK(cudaGetLastError());
    expected += r + 1;
    void* scratch = nullptr;  // allocation churn beside the work
    TCK(cudaMalloc(&scratch, (r + 1) * 4096));
    cudaEvent_t done;
    TCK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    TCK(cudaEventRecord(done, s));
    TCK(cudaMemcpyAsync(host.data(), mine, kWords * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    TCK(cudaStreamSynchronize(s));
    TCK(cudaFree(scratch));
    for (unsigned v : host)
      if (v != expected) {
        ++wrong;
        break;
      }
    {
      std::lock_guard lock(relay.mu);
      if (relay.event[id]) cudaEventDestroy(relay.event[id]);
      relay.event[id] = done;
      relay.data[id] = mine;
      relay.round[id] = r;
    }
    relay.cv.notify_all();
    // The previous thread's buffer once it finished this round: its stream's event, waited on in ours.
    const int prev = (id + kThreads - 1) % kThreads;
    std::unique_lock lock(relay.mu);
    relay.cv.wait(lock, [&] { return relay.round[prev] >= r || failed_calls > 0; });
    if (failed_calls > 0) return;
    if (relay.round[prev] == r) {
      TCK(cudaStreamWaitEvent(s, relay.event[prev], 0));
      TCK(cudaMemcpyAsync(theirs, relay.data[prev], kWords * sizeof(unsigned), cudaMemcpyDeviceToDevice, s));
      lock.unlock();
      TCK(cudaMemcpyAsync(host.data(), theirs, kWords * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
      TCK(cudaStreamSynchronize(s));
      // The other thread may have gone on to later rounds meanwhile: at least round r's value.
      const unsigned least = (r + 1) * (r + 2) / 2;
      if (host[0] < least || host[kWords - 1] < least) ++wrong;
    }
  }
  TCK(cudaStreamSynchronize(s));
  TCK(cudaStreamDestroy(s));
  TCK(cudaFree(theirs));
  // (mine stays: the next thread may still copy it; main frees after every thread ended)
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  Relay relay;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(work, i, std::ref(relay));
  for (auto& t : threads) t.join();
  CHECK(failed_calls == 0, "%d threads x %d rounds: every CUDA call succeeded", kThreads, kRounds);
  CHECK(wrong == 0, "every thread's values, and those it took from another thread after its event, are right (%d wrong)",
        wrong.load());
  for (int i = 0; i < kThreads; ++i) {
    if (relay.event[i]) CK(cudaEventDestroy(relay.event[i]));
    if (relay.data[i]) CK(cudaFree(relay.data[i]));
  }
  CK(cudaDeviceSynchronize());
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
