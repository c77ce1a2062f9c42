// The `sim` backend: host-memory emulation of one device, for CI and development machines with no GPU.
// Memory, streams, events and modules behave as CUDA defines them; operations run in issue order, which
// is one order CUDA allows. Kernels run only where a plugin registered a host implementation.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend.h"
#include "cubin_index.h"
#include "gpool/sim_kernel.h"
#include "handle_table.h"
#include "shared_budget.h"

namespace gpool::worker {

struct SimOptions {
  uint64_t memory_bytes = 16ull << 30;  // what the device reports as total; allocations past it fail
  std::vector<std::string> kernel_plugins;
  // Large allocations from kFixedBase up, the same in every worker: models a driver that hands out the
  // same device addresses in every process, which a lease's devices must keep apart (issue 12).
  bool fixed_addresses = false;
  // Non-zero: CUDA IPC sees this worker on a host of its own, shared by the workers of the same salt
  // (gpool-server --sim-separate-host: its pid), so a lease's copies across two servers go as between hosts.
  uint64_t host_salt = 0;
  // Device memory the worker's context takes once made (what a context costs on a GPU), from `device`:
  // the device's memory shared by the server's workers (memory_ledger.h), in this worker's `slot`.
  uint64_t context_bytes = 0;
  std::shared_ptr<budget::SharedBudget> device;
  int slot = 0;
  // The device time this worker's kernels take, counted in its `slot` (ns) as each one ends: what the driver
  // counts of a process on a GPU, which gpool-server audits (server/src/compute_audit.h).
  std::shared_ptr<budget::SharedBudget> busy;
};

// What a node's parameter getters answer: a kernel node's launch, a memset's fill, a copy between device
// memory, an event node's event, a host node's function (a node made otherwise, a host copy's say, has
// none of these).
struct SimNodeParams {
  Launchable f;
  std::vector<uint32_t> shape;  // kernel nodes: grid xyz, block xyz, shared bytes
  std::vector<uint8_t> args;
  std::optional<DevFillRect> fill;
  uint32_t value = 0;
  std::optional<DevCopyRect> copy;
  uint64_t event = 0;
  uint64_t host = 0;  // host nodes: the client's host function id
};

class SimBackend : public Backend {
 public:
  static constexpr uint32_t kMultiprocessors = 132;  // the modelled device's SMs (an H100 SXM's)
  explicit SimBackend(SimOptions options);
  ~SimBackend() override;
  SimBackend(const SimBackend&) = delete;
  SimBackend& operator=(const SimBackend&) = delete;

  Status open(int device, proto::HelloReply& hello) override;
  void setMemoryCap(uint64_t bytes) override { options_.memory_bytes = std::min(options_.memory_bytes, bytes); }
  Status openContext() override;
// One method per call, declared through the call table, and the run() overrides that call them.
#define X(name, number, mode, ins, outs) proto::calls::name::handler name; GPOOL_BACKEND_RUN(name)
#include "gpool/protocol/calls.def"
#undef X
  Status MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) override;
  uint64_t captureGraph(uint64_t stream) override;
  void graphMemory(uint64_t& used, uint64_t& reserved) override;
  Status exportPhysical(uint64_t h, int& fd) override;
  Status importPhysical(int fd, uint64_t& bytes, uint64_t& h) override;
  Status exportPool(uint64_t pool, int& fd) override;
  Status importPool(int fd, uint64_t& pool) override;
  Status exportPoolPointer(uint64_t ptr, std::vector<uint8_t>& record) override;
  Status importPoolPointer(uint64_t pool, const std::vector<uint8_t>& record, IpcMapping& out) override;
  Status freeImportedPointer(uint64_t ptr, uint64_t stream) override;

  // Registration entry used by plugins (and tests in-process).
  void registerKernel(const char* name, gpool_sim_kernel_fn fn, unsigned n, const unsigned* sizes, const unsigned* aligns);
  uint64_t launches() const { return launches_; }

  // A sim kernel runs as it is launched: its time on the device is the host time of its launch.
  void startTiming(uint64_t) override { timing_from_ = std::chrono::steady_clock::now(); }
  void stopTiming(uint64_t) override;
  Finished takeFinished(bool) override { return std::exchange(timed_, Finished{}); }

 private:
  struct RegisteredKernel {
    gpool_sim_kernel_fn fn = nullptr;
    std::vector<uint32_t> layout;  // offset,size pairs
  };
  struct EventState {
    uint32_t flags = 0;
    bool recorded = false;
    std::chrono::steady_clock::time_point at;
  };
  struct Function {
    std::string name;
    uint64_t owner = 0;  // module or library handle
    bool from_module = true;  // a CUfunction (else a library's CUkernel)
  };
  using Ops = std::vector<std::function<void()>>;
  // Stream capture (sim_capture.cpp): a capture's graph gets each node as its work is issued. Every stream
  // in a capture (the one that began it, and those that joined by waiting on an event recorded in it) has
  // open dependencies, which its next node follows.
  struct CaptureSeq {
    uint64_t id = 0;
    bool invalidated = false, ended = false;
    uint64_t graph = 0;
    bool existing = false;  // captured into a graph that exists (StreamBeginCaptureToGraph)
    uint64_t origin = 0;    // the stream that began it, which ends it
  };
  struct Capture {  // one stream's part in a capture
    std::shared_ptr<CaptureSeq> seq;
    std::vector<uint64_t> after;
  };
  struct CapturedEvent {  // an event recorded inside a capture: what a stream that waits on it follows
    std::shared_ptr<CaptureSeq> seq;
    std::vector<uint64_t> after;
  };
  std::unordered_map<uint64_t, CapturedEvent> captured_events_;
  static SimNodeParams kernelParams(const KernelCall& c);
  static SimNodeParams fillParams(const DevFillRect& f, uint32_t value) { return SimNodeParams{.fill = f, .value = value}; }
  static SimNodeParams copyParams(const DevCopyRect& c) { return SimNodeParams{.copy = c}; }
  static SimNodeParams eventParams(uint64_t event) { return SimNodeParams{.event = event}; }
  static SimNodeParams hostParams(uint64_t id) { return SimNodeParams{.host = id}; }
  uint64_t captureNode(Capture& c, std::function<void()> op, uint32_t type, SimNodeParams params = {});  // the node made
  bool joined(const CaptureSeq& seq, const std::vector<uint64_t>& origin_after) const;
  uint64_t newHandle(HandleKind kind);
  // The capture recording into `stream`, or nullptr when the stream runs work directly.
  Capture* capturing(uint64_t stream);
  // Runs `op` now, or records it into the stream's capture as a node of `type` (a CUgraphNodeType).
  void issue(uint64_t stream, std::function<void()> op, uint32_t type = 0, SimNodeParams params = {});
  Status refuseInCapture(Capture& c, const char* what);
  void releaseAll();  // frees every allocation, global, physical allocation and reservation

  SimOptions options_;
  bool context_open_ = false;
  std::set<uint64_t> allocations_;  // host memory standing in for device allocations
  struct Pool {
    std::unordered_map<uint32_t, uint64_t> attributes;  // set by the client; the rest have defaults
    uint64_t used = 0, used_high = 0;
    uint32_t handle_types = 0;  // CUmemAllocationHandleType bits it was created with (exportable)
    // Imported from another worker's (sim_ipc.cpp): that worker's process and pool. It allocates nothing;
    // it opens that pool's allocations.
    int32_t source_pid = 0;
    uint64_t source_pool = 0;
  };
  uint64_t pool(uint32_t which);  // 0: the device's current pool, 1: its default pool (made on first use)
  Status poolAllocate(uint64_t pool, AllocBytes bytes, NewAlloc& out);
  std::unordered_map<uint64_t, Pool> pools_;
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> pool_allocations_;  // ptr -> pool, bytes
  uint64_t default_pool_ = 0, current_pool_ = 0;
  struct SimArray {  // a CUDA array (sim_arrays.cpp): dense rows, then slices
    ArrayShape shape;
    std::shared_ptr<std::vector<uint8_t>> storage;
  };
  std::unordered_map<uint64_t, SimArray> arrays_;
  struct SimMipmap {
    std::vector<SimArray> levels;
    std::vector<uint64_t> handles;  // each level's array handle, once asked for (0: not yet)
  };
  std::unordered_map<uint64_t, SimMipmap> mipmaps_;
  std::unordered_map<uint64_t, std::map<uint32_t, std::vector<uint8_t>>> stream_attributes_;  // sim_graph.cpp
  std::unordered_map<uint64_t, int> physical_fds_;  // cuMemCreate handle -> its memfd (sim_virtual_memory.cpp)
  std::map<uint64_t, uint64_t> reservations_;       // address reservations: base -> size
  struct SharedMemory {
    int fd = -1;
    uint64_t size = 0;
  };
  std::unordered_map<uint64_t, SharedMemory> shared_;  // large allocations: memfd mappings (sim_ipc.cpp)
  void* mapShared(int fd, uint64_t size);  // where the next large allocation goes
  // With fixed addresses: maps `size` bytes at the next free fixed address aligned to `alignment` (fd -1:
  // anonymous), or MAP_FAILED.
  void* mapFixed(int fd, uint64_t size, uint64_t alignment, int prot, int flags);
  void* reserveRange(uint64_t size, uint64_t alignment, uint64_t hint);  // cuMemAddressReserve's range
  uint64_t next_fixed_ = 0x300000000;       // SimOptions::fixed_addresses: the next address tried
  // Other workers' memory opened here. An IPC handle opened again gives the same address, counted, as the
  // driver does (`handle`: the IPC handle it was opened by; none for a pool's allocation).
  struct Opened {
    uint64_t size = 0;
    uint32_t opens = 1;
    std::vector<uint8_t> handle;
  };
  std::unordered_map<uint64_t, Opened> opened_;                // base -> what is open there
  std::map<std::vector<uint8_t>, uint64_t> opened_handles_;    // IPC handle -> base
  // A large allocation's memfd, shared with the host's other workers by descriptor (shareable_handles.h: over
  // the registry's socket, as neither a sandboxed worker nor another user may open /proc/PID/fd of this one):
  // its size and the handle that names it.
  Status sharePages(uint64_t ptr, uint64_t& size, uint8_t* pages);  // (pages: IpcRegistry::kHandleBytes)
  Status openShared(const std::vector<uint8_t>& pages, uint64_t size, IpcMapping& out);  // maps what sharePages shared
  void closeOpened(uint64_t ptr);  // one open of what openShared mapped there ends (the last unmaps it)
  std::unordered_map<uint64_t, std::vector<std::pair<uint32_t, std::vector<uint8_t>>>> links_;  // sim_link.cpp
  // Where the driver compiles PTX, it keeps the result in its JIT cache: the sim's entry (sim_link.cpp).
  static void keepInJitCache(const uint8_t* ptx, size_t size);
  uint64_t next_handle_ = 1;
  uint64_t launches_ = 0;
  std::chrono::steady_clock::time_point timing_from_;  // (startTiming)
  Finished timed_;  // launches timed since the last takeFinished
  std::unordered_map<std::string, RegisteredKernel> kernels_;
  std::unordered_map<uint64_t, EventState> events_;
  std::unordered_map<uint64_t, Function> functions_;  // CUfunction and CUkernel handles
  std::unordered_map<uint64_t, CubinIndex> images_;  // module/library handle -> what its cubin declares
  std::unordered_map<uint64_t, uint64_t> library_modules_;  // library -> its module (LibraryGetModule)
  std::unordered_map<uint64_t, uint64_t> kernel_function_;  // CUkernel -> its CUfunction
  std::map<std::pair<uint64_t, std::string>, uint64_t> globals_;  // (module, name) -> sim address
  std::unordered_map<uint32_t, uint64_t> limits_;
  std::map<std::pair<uint64_t, int32_t>, int32_t> func_attributes_;  // (function, attribute) -> as set
  uint64_t attributesOf(Launchable f);  // the function whose attributes `f`'s are
  static constexpr int32_t kMaxDynamicShared = 232448;
  std::unordered_map<uint64_t, Capture> captures_;  // stream -> capture under way
  // Graphs (sim_graph.cpp): a graph is its nodes in creation order; an instantiation, its nodes' work in a
  // topological order. A conditional node's work is made when its graph is instantiated, from its bodies
  // as they are then.
  struct SimConditional {
    uint32_t value = 0, initial = 0, flags = 0;
    uint64_t graph = 0;
  };
  struct SimNode {
    std::function<void()> op;
    std::vector<uint64_t> deps;
    uint64_t graph = 0;
    uint32_t type = 0;       // CUgraphNodeType
    uint64_t origin = 0;     // in a clone: the node it copies
    uint64_t condition = 0;  // conditional nodes: the handle and the CUgraphConditionalNodeType
    uint32_t cond_type = 0;
    std::vector<uint64_t> bodies;  // the graphs a conditional or child-graph node embeds (and owns)
    std::map<uint32_t, std::vector<uint8_t>> attributes;  // kernel nodes: launch attributes set (id -> value)
    uint64_t mem_ptr = 0, mem_bytes = 0;  // memory nodes: the allocation's address and size (a free node: 0 bytes)
    SimNodeParams params;
  };
  struct SimExec {
    std::vector<uint64_t> nodes;
    Ops ops;
    std::vector<uint32_t> types;
    std::vector<char> enabled;
    std::vector<std::shared_ptr<SimConditional>> resets;  // conditions set to their default at each launch
  };
  std::unordered_map<uint64_t, std::vector<uint64_t>> graphs_;
  std::unordered_map<uint64_t, SimNode> nodes_;
  std::unordered_map<uint64_t, SimExec> execs_;
  std::unordered_map<uint64_t, std::shared_ptr<SimConditional>> conditionals_;
  Status kernelOp(const KernelCall& call, std::function<void()>& op);  // a launch's work, run now or later
  bool topological(uint64_t graph, std::vector<uint64_t>& order) const;  // false: a cycle
  Status addNode(uint64_t graph, const GraphNodes& deps, std::function<void()> op, Created<GraphNode>& out,
                 uint32_t type, SimNodeParams params = {});
  // A graph's work in a topological order; false: a cycle. Conditional nodes are made from their bodies.
  bool graphOps(uint64_t graph, std::vector<uint64_t>& order, Ops& ops);
  std::function<void()> conditionalOp(const SimNode& node);
  std::function<void()> childOp(const SimNode& node);
  uint64_t cloneGraph(uint64_t graph, std::unordered_map<uint64_t, uint64_t>& copies);
  std::vector<std::shared_ptr<SimConditional>> resetsOf(uint64_t graph) const;
  void destroyGraph(uint64_t graph);
  bool instantiate(uint64_t graph, SimExec& e);  // false: a cycle
  std::function<void()> eventOp(uint64_t event, uint32_t wait);
  // Memsets and copies as work that may run later (captured, a graph's node): see reachable().
  std::function<void()> fillOp(const DevFillRect& f, uint32_t value);
  std::function<void()> copyOp(const DevCopyRect& c);
  std::function<void()> hostCopyOp(const HostRowsCopy& c, uint64_t id);
  std::function<void()> memOpsOp(const MemOps& m);  // a batch memory-operation node's operations
  // Whether [ptr, ptr+bytes) is still the client's memory when deferred work runs; if not, the launch
  // running it fails with CUDA_ERROR_ILLEGAL_ADDRESS (fault_).
  bool reachable(uint64_t ptr, uint64_t bytes);
  Status fault_ = 0;
  bool said_unsatisfied_wait_ = false;
  SimNode* nodeOf(uint64_t node, uint32_t type);  // the graph's node, if it is of `type`
  int execIndex(uint64_t exec, uint64_t node);  // the node's place in an instantiation, or -1
  char* enabledFlag(uint64_t exec, uint64_t node);  // an instantiation's switch for a node, if it has one
  std::function<void()>* execOp(uint64_t exec, uint64_t node, uint32_t type);  // an instantiation's work for a node
  static void setConditional(void* sim, unsigned long long handle, unsigned value);
  // Graph memory (sim_graph_memory.cpp): each allocation node's host memory, made with the node and kept
  // until the context ends; the device's graph reserve as CUDA keeps it: it grows to cover what live graph
  // allocations use, and shrinks to that when trimmed.
  struct GraphAllocation {
    uint64_t bytes = 0;
    bool live = false;
  };
  std::unordered_map<uint64_t, GraphAllocation> graph_allocations_;
  uint64_t graph_used_ = 0, graph_used_high_ = 0, graph_reserved_ = 0, graph_reserved_high_ = 0;
  Status graphAllocate(uint64_t bytes, uint64_t& ptr);
  std::function<void()> graphAllocOp(uint64_t ptr);
  std::function<void()> graphFreeOp(uint64_t ptr);
  Status captureAllocation(Capture& c, AllocBytes bytes, NewAlloc& out);
  Status streamFree(uint64_t ptr, uint64_t stream);  // cuMemFreeAsync of a graph allocation
  bool isBody(uint64_t graph) const;        // a conditional node's body graph
  bool hasMemoryNodes(uint64_t graph) const;
  void clearGraphMemory();
  // User objects (sim_user_objects.cpp): references held by the client, by graphs and by instantiations
  // (which take their graph's); the destructor, the client's host function, runs when the last goes.
  struct SimUserObject {
    uint64_t id = 0;  // the destructor's host function
    uint64_t refs = 0;
  };
  std::unordered_map<uint64_t, SimUserObject> user_objects_;
  std::unordered_map<uint64_t, std::map<uint64_t, uint64_t>> object_refs_;  // graph or instantiation -> object -> refs
  void dropObjectRefs(uint64_t obj, uint64_t count);
  void copyObjectRefs(uint64_t from, uint64_t to);  // a clone or an instantiation takes its graph's
  void releaseObjectRefs(uint64_t holder);          // a graph or an instantiation is destroyed
  // Green contexts (sim_green_contexts.cpp): SM partitions, counted only (kernels run on the host).
  struct SmPart {
    uint32_t sms, min, align;  // smCount, minSmPartitionSize, smCoscheduledAlignment
  };
  Status smParts(SmSource source, SmSplit split, std::vector<SmPart>& parts) const;
  std::unordered_map<uint64_t, uint32_t> green_contexts_;  // green context -> its SMs
  uint64_t next_capture_id_ = 1;
  std::vector<void*> plugins_;
};

}  // namespace gpool::worker
