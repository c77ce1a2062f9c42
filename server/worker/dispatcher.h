// Serves one client connection: reads frames, checks them, runs them on a Backend in order, latches
// asynchronous errors and writes replies. A protocol violation ends this connection only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "alive_signal.h"
#include "backend.h"
#include "compute_share.h"
#include "graph_memory.h"
#include "handle_table.h"
#include "import_holds.h"
#include "memory_ledger.h"
#include "module_cache.h"
#include "output_relay.h"
#include "request_checks.h"
#include "transport_switch.h"
#include "gpool/protocol/frame_io.h"
#include "gpool/protocol/transport.h"
#include "gpool/worker_stop.h"

namespace gpool::worker {

// Why a worker stopped serving a client whose lease ended: its log's reason, and what the client is told.
inline constexpr const char* kLeaseEndedReason = workerStopReason(static_cast<int>(WorkerStop::kLeaseEnded));

struct ServeResult {
  bool clean = false;  // the client closed the connection
  std::string reason;  // why serving stopped, for the log
  const char* transport = "over TCP";  // or "over shared memory" or "over RDMA (UCX)", once the client moved
  uint64_t frames = 0;
  // Module images: sent by the client, and loaded from the host's cache instead.
  uint64_t images_received = 0, image_bytes_received = 0;
  uint64_t images_from_cache = 0, image_bytes_from_cache = 0;
};

class Dispatcher {
 public:
  // `memory_limit`: the device memory the lease may hold (the lease's cap, or the device's size).
  // `cache` (may be null) is the host's module image cache.
  Dispatcher(Backend& backend, proto::Transport& transport, uint64_t memory_limit, ModuleCache* cache = nullptr)
      : Dispatcher(backend, transport, MemoryLedger(memory_limit), cache) {}
  // `ledger`: the lease's memory, possibly shared with its other workers (memory_ledger.h).
  Dispatcher(Backend& backend, proto::Transport& transport, MemoryLedger ledger, ModuleCache* cache = nullptr)
      : backend_(backend), transport_(&transport), ledger_(std::move(ledger)), cache_(cache) {
    backend_.watchMemory(&table_);
  }
  // The stall timeout a transport the client moves to gets (gpool-worker --stall-timeout).
  void setStallTimeout(int ms) { stall_ms_ = ms; }
  // Counts each kernel or graph the device accepted in `slot` of `page` (gpool-server's page of launch
  // counters, shared with its workers: what it reports to the allocator as the lease's activity).
  void countLaunchesIn(std::shared_ptr<budget::SharedBudget> page, int slot) { launches_ = std::move(page), launch_slot_ = slot; }
  // Holds the lease's kernels and graphs to its compute share (compute_share.h); without it they run unpaced.
  void shareCompute(std::unique_ptr<ComputeShare> share) { compute_ = std::move(share); }
  const ComputeShare* computeShare() const { return compute_.get(); }
  // Relays `relay`'s output (the worker's standard output) to a client that asks for it (kMsgOutput).
  void relayOutput(OutputRelay* relay) { output_ = relay; }
  // Runs until the client disconnects or violates the protocol, or stop is called.
  ServeResult serve();
  // From another thread (revocation.h): the lease ended, or the worker was told to stop (`why`). A client
  // that asked is told why (kMsgEnded) if that takes less than kTellEndedMs, and the connection is shut
  // down, so serve returns once the call it may be in does; called before serve, serve returns at once.
  void stop(const std::string& why = kLeaseEndedReason);
  static constexpr int kTellEndedMs = 1000;
  // After serve: lets go of what the client imported (so that two workers that imported from each other
  // do not wait for each other), ends the client's exports, and says whether other processes still hold
  // any of its memory (import_holds.h).
  bool importersHold();
  // Then waits for them to let go, so that the lease stays charged for it meanwhile.
  void waitForImporters();

 private:
  void handle(const proto::FrameHeader& h);
  void reply(const proto::FrameHeader& h, const std::vector<uint8_t>& payload);
  // A reply that carries only a status (refusals, unknown messages).
  void replyStatus(const proto::FrameHeader& h, Status st);
  // What a request that waits reports before it runs: the latched failure of an earlier asynchronous
  // call, which it takes (0 when none) — unless the client sent it aside (kAside), for itself.
  Status takeLatched(const proto::FrameHeader& h);
  void memcpyDtoH(const proto::FrameHeader& h);
  void alive(const proto::FrameHeader& h);
  void moduleLoadCached(const proto::FrameHeader& h);
  void switchTransport(const proto::FrameHeader& h);
  void tellEnded(const std::string& why);
  // The send lock every reply holds, with the worker's output written since the last reply sent first.
  std::unique_lock<std::mutex> replyLock();
  template <typename C>
  void dispatch(const proto::FrameHeader& h);
  // Checks the request's fields, runs it on the backend and records what its reply hands out.
  template <typename C>
  Status execute(typename C::in::tuple& ins, typename C::out::tuple& outs);
  // Graph memory around a call (graph_memory.h): the capture a stream-ordered allocation or free joins,
  // room for what a graph launch may add to the reserve, and the lease's charge once the reserve changed.
  template <typename C>
  Status beforeCall(typename C::in::tuple& ins, CallScope& s, uint64_t& headroom);
  template <typename C>
  void afterCall(typename C::in::tuple& ins, const typename C::out::tuple& outs, Status st, const CallScope& s,
                 uint64_t headroom);
  uint64_t captureOf(proto::Stream stream);
  // The stream a kernel or graph launch runs on when the compute share times it (not while it captures).
  template <typename C>
  std::optional<uint64_t> pacedStream(const typename C::in::tuple& ins);
  void settleGraphMemory(uint64_t headroom = 0);
  // Exports a successful call ends (a free, a release, a context reset): memory importers still hold
  // stays charged (import_holds.h). Called before the call's record gives its memory back.
  template <typename C>
  void endExports(typename C::in::tuple& ins, const CallScope& s);
  // After its client left, while other processes hold some of its memory (`held`): frees everything else
  // the client had and closes what it imported (client_departure.cpp).
  void freeAllBut(const std::set<std::pair<Shared, uint64_t>>& held);
  // Runs call C for the client that left, through the same checks and records as the client's own calls.
  template <typename C>
  Status runForDeparted(typename C::in::tuple ins) {
    typename C::out::tuple outs;
    return execute<C>(ins, outs);
  }

  Backend& backend_;
  proto::Transport* transport_;  // the TCP connection, or what it moved to (moved_); set under transport_mu_
  std::mutex transport_mu_;      // (so that stop shuts down the one in use)
  std::string stopped_;          // why stop was called (empty: it was not); under transport_mu_
  std::atomic<bool> tell_end_{false};  // the client asked why the worker ends the connection (kMsgEnded)
  std::unique_ptr<proto::Transport> moved_;
  HandleTable table_;    // what this worker handed out
  MemoryLedger ledger_;  // the lease's memory
  GraphMemory graph_memory_{table_, ledger_};
  RequestChecks checks_{table_, ledger_, graph_memory_};
  FreedWhileImported freed_imported_{ledger_, table_};
  std::vector<uint64_t> imported_physical_;  // held until released and unmapped (afterCall)
  std::vector<uint64_t> pool_imports_;       // another process's pool allocations opened here, once per open
  std::span<const uint8_t> payload_;  // the current request's payload, in the backend's frame buffer
  std::vector<uint8_t> out_;
  Status latched_ = 0;
  int stall_ms_ = 0;  // first failure of a call nobody waited for
  ModuleCache* cache_;
  OutputRelay* output_ = nullptr;
  std::unique_ptr<ComputeShare> compute_;  // (shareCompute; null: launches are not paced)
  std::shared_ptr<budget::SharedBudget> launches_;  // (countLaunchesIn; null: not counted)
  int launch_slot_ = 0;
  ServeResult stats_;
  AliveSignal alive_{*transport_};  // last: its thread stops before anything it reads goes
};

}  // namespace gpool::worker
