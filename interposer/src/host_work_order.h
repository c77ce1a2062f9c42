// The order between the program's threads and this library's host-function channel threads, which touch
// the program's memory: they run its host functions and read or write its captured copies' rows. The
// worker makes that order. A host function or a row copy starts only after the requests that lead to it
// left this process; the worker waits for the thread's answer before the stream goes on, and so before it
// replies to a call that waits for the stream. The C++ memory model sees no order through a socket or
// through another process's shared memory, though, so each side publishes (release) before its bytes
// leave and acquires after bytes arrive: the order is then one the language, and ThreadSanitizer, know.
// It costs an atomic increment per batch of requests sent and an atomic load per reply or request read.
#pragma once

#include <atomic>
#include <cstdint>

namespace gpool::client {

inline std::atomic<uint64_t> g_requests_sent{0};
inline std::atomic<uint64_t> g_host_work_done{0};

// On whichever thread sends a batch of requests to a worker, before it leaves.
inline void publishRequests() { g_requests_sent.fetch_add(1, std::memory_order_release); }
// On a host-function channel's thread, once a request from the worker has arrived, before it acts on it.
inline void acquireRequests() { (void)g_requests_sent.load(std::memory_order_acquire); }
// On a host-function channel's thread, after its work on the program's memory, before its answer.
inline void publishHostWork() { g_host_work_done.fetch_add(1, std::memory_order_release); }
// On the program's thread, after a reply from the worker, before the call returns to the program.
inline void acquireHostWork() { (void)g_host_work_done.load(std::memory_order_acquire); }

}  // namespace gpool::client
