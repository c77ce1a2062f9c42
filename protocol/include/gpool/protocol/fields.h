// Typed request and reply fields for calls.def. On the wire each is the plain integers it holds; the
// type says what the value must be, so the worker checks every handle and device range of a request in
// one place (server/worker/request_checks.h) before a backend sees it, and records what a reply hands out.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "gpool/protocol/wire.h"

namespace gpool::proto {

// Kinds of handle a worker hands out. Values are part of no wire format.
enum class HandleKind : uint8_t {
  kStream, kEvent, kModule, kLibrary, kFunction, kKernel, kGraph, kGraphExec, kMemPool,
  kPhysical,  // a CUmemGenericAllocationHandle (cuMemCreate): device memory not yet at an address
  kLinkState,  // a CUlinkState: a JIT link under way on the worker's driver
  kGraphNode,  // a CUgraphNode, owned by its graph
  kConditional,  // a CUgraphConditionalHandle, owned by the graph it was made for
  kArray,        // a CUarray: device memory laid out for textures and surfaces, reached only by copies
  kTexObject,    // a CUtexObject: a value kernels take as an argument (never marked: interposer/src/handle_tags.h)
  kSurfObject,   // a CUsurfObject: likewise
  kMipmappedArray,  // a CUmipmappedArray: its levels are arrays it owns
  kUserObject,      // a CUuserObject: a destructor that runs on the client when its last reference goes
  kGreenCtx,        // a CUgreenCtx: a partition of the device's SMs that streams run in
};

// A handle of kind K that this worker handed out earlier (streams: also 0, 1 and 2, the legacy and
// per-thread default streams, which always exist).
template <HandleKind K>
struct Handle {
  static constexpr HandleKind kind = K;
  uint64_t v = 0;
  Handle() = default;
  Handle(uint64_t x) : v(x) {}  // NOLINT: implicit, so callers pass raw handle values
  operator uint64_t() const { return v; }
  GPOOL_WIRE_FIELDS(v)
};
using Stream = Handle<HandleKind::kStream>;
using Event = Handle<HandleKind::kEvent>;
using Kernel = Handle<HandleKind::kKernel>;
using Graph = Handle<HandleKind::kGraph>;
using GraphExec = Handle<HandleKind::kGraphExec>;
using MemPool = Handle<HandleKind::kMemPool>;
// Physical memory from cuMemCreate. Created<Physical> charges the call's AllocBytes to the lease; the
// bytes come back once the client released it and no mapping uses it any more.
using Physical = Handle<HandleKind::kPhysical>;
using LinkState = Handle<HandleKind::kLinkState>;
// A CUDA array. Created<Array> charges the call's ArrayShape to the lease; Released<Array> gives it back.
using Array = Handle<HandleKind::kArray>;
// A node of the graph named earlier in the same request (the request's Graph field).
using GraphNode = Handle<HandleKind::kGraphNode>;
// Nodes of the request's graph (dependencies, edges); each must be that graph's. As a reply field,
// Created<GraphNodes> hands out nodes of the request's graph (a listing names captured nodes too).
struct GraphNodes {
  std::vector<uint64_t> v;
  GPOOL_WIRE_FIELDS(v)
};
// Edges of the request's graph (cuGraphAddDependencies, cuGraphRemoveDependencies): from[i] to to[i], as many
// of one as of the other, every one a node of that graph.
struct GraphEdges {
  GraphNodes from, to;
  GPOOL_WIRE_FIELDS(from, to)
};
// A conditional handle made for the request's graph (its conditional nodes and the kernels that set it).
using Conditional = Handle<HandleKind::kConditional>;
// Reply field: graphs a node embeds (a conditional node's bodies, a child-graph node's copy). They belong to
// the node: destroying it or its graph ends them, and the client may add nodes to them but never destroy them.
struct BodyGraphs {
  std::vector<uint64_t> v;
  GPOOL_WIRE_FIELDS(v)
};
// A graph used as a child node's body (any graph of this worker's; the driver copies it).
struct ChildGraph {
  uint64_t v = 0;
  GPOOL_WIRE_FIELDS(v)
};

// A CUfunction or a CUkernel. The worker's check says which (is_kernel is not on the wire).
struct Launchable {
  uint64_t v = 0;
  bool is_kernel = false;
  Launchable() = default;
  Launchable(uint64_t x) : v(x) {}  // NOLINT
  operator uint64_t() const { return v; }
  GPOOL_WIRE_FIELDS(v)
};

// Launch attributes: CUlaunchAttribute[] as cuda.h lays them out (64-byte value after an 8-byte id), at
// most kMax. Checked before any backend sees them: only attributes a launch may carry; an event an
// attribute names is one of this worker's, and an access-policy window lies in the client's memory.
struct LaunchAttrs {
  Blob data;
  GPOOL_WIRE_FIELDS(data)
  static constexpr uint64_t kMax = 32;
};

// A kernel launch as a graph node holds it: function, grid, block, shared bytes and the packed parameters.
struct KernelCall {
  Launchable f;
  uint32_t gx = 1, gy = 1, gz = 1, bx = 1, by = 1, bz = 1, shared = 0;
  Blob params;
  GPOOL_WIRE_FIELDS(f, gx, gy, gz, bx, by, bz, shared, params)
};

// CUfunction handles (modules) or CUkernel handles (libraries) of one loaded image.
struct LaunchableList {
  std::vector<uint64_t> v;
  GPOOL_WIRE_FIELDS(v)
};

// A loaded image: kind 0 is a CUmodule, 1 a CUlibrary.
struct ModuleRef {
  uint64_t handle = 0;
  uint32_t kind = 0;
  GPOOL_WIRE_FIELDS(handle, kind)
};

// Request field: a handle this call ends (destroy, unload). Checked as T; forgotten when the call succeeds
// (with everything it owns: a module's functions, kernels and globals).
template <typename T>
struct Released : T {
  using T::T;
  Released() = default;
  Released(const T& t) : T(t) {}  // NOLINT
};
// Reply field: a handle this call hands out; remembered when the call succeeds.
template <typename T>
struct Created : T {
  using T::T;
  Created() = default;
  template <typename U>
    requires std::is_constructible_v<T, const U&>
  Created& operator=(const U& u) {
    static_cast<T&>(*this) = T(u);
    return *this;
  }
};

// Device memory the request reads or writes: [ptr, ptr+bytes) inside one live allocation or global.
struct DevRange {
  uint64_t ptr = 0, bytes = 0;
  GPOOL_WIRE_FIELDS(ptr, bytes)
};
// A host-to-device write: `data` lands at [ptr, ptr+data.size).
struct DevWrite {
  uint64_t ptr = 0;
  Blob data;
  GPOOL_WIRE_FIELDS(ptr, data)
};
// A device-to-device copy of `bytes` from src to dst; both ranges are checked.
struct DevCopy {
  uint64_t dst = 0, src = 0, bytes = 0;
  GPOOL_WIRE_FIELDS(dst, src, bytes)
};
// `count` elements of `elem` bytes (1, 2 or 4) from ptr, aligned to elem.
struct DevFill {
  uint64_t ptr = 0;
  uint32_t elem = 1;
  uint64_t count = 0;
  GPOOL_WIRE_FIELDS(ptr, elem, count)
  uint64_t bytes() const { return count * elem; }
};

// A pitched device region: `height` rows of `width` bytes, `pitch` bytes apart, from ptr.
struct DevRect {
  uint64_t ptr = 0, pitch = 0, width = 0, height = 0;
  GPOOL_WIRE_FIELDS(ptr, pitch, width, height)
  uint64_t span() const { return height == 0 || width == 0 ? 0 : pitch * (height - 1) + width; }
};
// Rows written from the host: `data` holds the region's rows packed (width * height bytes).
struct DevWriteRect {
  DevRect dst;
  Blob data;
  GPOOL_WIRE_FIELDS(dst, data)
};
// A copy between rows of the client's memory and device rows (HostCopyCapture, GraphAddHostCopyNode):
// which way, and the device rows; the client's rows travel packed, width * height bytes, on the
// host-function channel, in one frame.
struct HostRowsCopy {
  enum Direction : uint32_t { kToDevice = 0, kFromDevice = 1 };
  uint32_t direction = kToDevice;
  DevRect device;
  GPOOL_WIRE_FIELDS(direction, device)
  bool toDevice() const { return direction == kToDevice; }
  uint64_t bytes() const { return device.width * device.height; }
};
// A 2D device-to-device copy: both regions have the same width and height.
struct DevCopyRect {
  DevRect dst, src;
  GPOOL_WIRE_FIELDS(dst, src)
};
// A 2D memset of `elem`-byte values (1, 2 or 4): width is in bytes, a multiple of elem; ptr and pitch
// are aligned to elem.
struct DevFillRect {
  DevRect dst;
  uint32_t elem = 1;
  GPOOL_WIRE_FIELDS(dst, elem)
};
// Request field of cuMemAllocPitch: rows of `width` bytes. The worker reserves width rounded up to
// kMaxPitchAlign times height against the lease, then counts the pitch the driver chose.
struct PitchedAlloc {
  static constexpr uint64_t kMaxPitchAlign = 512;  // no GPU aligns pitches more coarsely
  uint64_t width = 0, height = 0;
  uint32_t elem = 0;  // 4, 8 or 16, as cuMemAllocPitch's ElementSizeBytes
  GPOOL_WIRE_FIELDS(width, height, elem)
};

// Request field of cuArray3DCreate: `width` elements of `channels` values of `format`, by `height` rows
// (0: a 1D array) by `depth` slices or layers (0: none), with CUDA_ARRAY3D_* `flags`. The worker checks the
// format, channels and flags, and charges bytes() to the lease before the backend runs.
struct ArrayShape {
  uint64_t width = 0, height = 0, depth = 0;
  uint32_t format = 0, channels = 0, flags = 0;
  GPOOL_WIRE_FIELDS(width, height, depth, format, channels, flags)
  // Bytes of one value of a CUarray_format (0: a format gpool does not take: planar video, block-compressed).
  static uint32_t formatBytes(uint32_t format) {
    switch (format) {
      case 0x01: case 0x08: return 1;              // (UN)SIGNED_INT8
      case 0x02: case 0x09: case 0x10: return 2;   // (UN)SIGNED_INT16, HALF
      case 0x03: case 0x0a: case 0x20: return 4;   // (UN)SIGNED_INT32, FLOAT
      default: return 0;
    }
  }
  uint64_t elementBytes() const { return uint64_t{formatBytes(format)} * channels; }
  uint64_t rowBytes() const { return width * elementBytes(); }
  uint64_t rows() const { return height ? height : 1; }
  uint64_t slices() const { return depth ? depth : 1; }
  // What the array holds, or 0 when the shape is not one (zero width, overflow).
  uint64_t bytes() const {
    constexpr uint64_t kMaxExtent = uint64_t{1} << 20;  // beyond any GPU's largest array dimension; below it no product overflows
    if (width == 0 || width >= kMaxExtent || height >= kMaxExtent || depth >= kMaxExtent || elementBytes() == 0) return 0;
    return rowBytes() * rows() * slices();
  }
};
// A mipmapped array. Created<MipmappedArray> charges the call's MipmapShape (all its levels) to the lease.
using MipmappedArray = Handle<HandleKind::kMipmappedArray>;
using TexObject = Handle<HandleKind::kTexObject>;
using SurfObject = Handle<HandleKind::kSurfObject>;
// What a texture or surface object reads (CUDA_RESOURCE_DESC): `type` 0, a CUDA array; 2, `bytes` of
// linear device memory from ptr; 3, pitched device memory: `height` rows of `width` elements, `pitch` bytes
// apart. Types 2 and 3 name the elements' `format` and `channels`. The worker checks the array is the
// client's, or the memory inside its allocations; mipmapped arrays (type 1) are not taken.
struct TexResource {
  uint32_t type = 0;
  Array array;
  uint64_t ptr = 0, bytes = 0, pitch = 0, width = 0, height = 0;
  uint32_t format = 0, channels = 0, flags = 0;
  MipmappedArray mipmap;  // type 1
  GPOOL_WIRE_FIELDS(type, array, ptr, bytes, pitch, width, height, format, channels, flags, mipmap)
};

// A texture object's descriptors, which hold values only: CUDA_TEXTURE_DESC and, where given,
// CUDA_RESOURCE_VIEW_DESC (empty: none). The worker checks their sizes; the driver, their values.
struct TexDescs {
  static constexpr uint64_t kTextureBytes = 104, kViewBytes = 112;  // (static_asserts in cuda_backend.cpp)
  std::vector<uint8_t> texture, view;
  GPOOL_WIRE_FIELDS(texture, view)
};

// Request field of cuMipmappedArrayCreate: level 0's shape and the number of levels (1 to 32). Each
// level halves width, height and (unless layered or a cubemap) depth, down to 1. The worker charges all
// the levels' bytes to the lease.
struct MipmapShape {
  ArrayShape base;
  uint32_t levels = 0;
  GPOOL_WIRE_FIELDS(base, levels)
  ArrayShape level(uint32_t l) const {
    auto half = [l](uint64_t x) { return x == 0 ? 0 : std::max<uint64_t>(1, x >> l); };
    ArrayShape a = base;
    a.width = half(base.width);
    a.height = half(base.height);
    if (!(base.flags & 0x05)) a.depth = half(base.depth);  // (LAYERED, CUBEMAP: layers and faces stay)
    return a;
  }
  uint64_t bytes() const {  // 0: not a shape gpool takes
    if (levels == 0 || levels > 32 || base.bytes() == 0) return 0;
    uint64_t sum = 0;
    for (uint32_t l = 0; l < levels; ++l) sum += level(l).bytes();
    return sum;
  }
};
// Request field of cuMipmappedArrayGetLevel: a level of a mipmapped array of the client's; the array it
// hands out is the mipmap's (not charged again, not the client's to destroy).
struct MipmapLevel {
  MipmappedArray mipmap;
  uint32_t level = 0;
  GPOOL_WIRE_FIELDS(mipmap, level)
};

// A rectangle of one slice of an array: `height` rows of `width` bytes, from byte `x` of row `y` of
// slice `z`; x and width whole elements. The worker checks it lies inside the array.
struct ArrayRect {
  Array array;
  uint64_t x = 0, y = 0, z = 0, width = 0, height = 0;
  GPOOL_WIRE_FIELDS(array, x, y, z, width, height)
};
// Rows written from the host into an array: `data` holds them packed (width * height bytes).
struct ArrayWrite {
  ArrayRect dst;
  Blob data;
  GPOOL_WIRE_FIELDS(dst, data)
};
// A copy between an array's rectangle and a pitched device region of the same width and height (the
// call says which way).
struct ArrayDevCopy {
  ArrayRect array;
  DevRect device;
  GPOOL_WIRE_FIELDS(array, device)
};
// A copy between two arrays' rectangles of the same width and height.
struct ArrayCopy {
  ArrayRect dst, src;
  GPOOL_WIRE_FIELDS(dst, src)
};

// A 4- or 8-byte word of device memory, aligned to its size (stream memory operations).
struct DevWord {
  uint64_t ptr = 0;
  uint32_t bytes = 4;
  GPOOL_WIRE_FIELDS(ptr, bytes)
};

// A batch memory-operation graph node's operations (cuGraphAddBatchMemOpNode), kWordsPerOp words each:
// the operation (CUstreamBatchMemOpType: wait or write of a 32- or 64-bit word, flush of remote writes,
// barrier) in the low half of the first and its flags in the high half, then the word's address and the
// value (both 0 for a flush or a barrier). A word must be device memory of the client's, aligned to its
// size; at most kMaxOps operations.
struct MemOps {
  std::vector<uint64_t> v;
  static constexpr size_t kWordsPerOp = 3, kMaxOps = 256;
  static constexpr uint32_t kWait32 = 1, kWrite32 = 2, kFlush = 3, kWait64 = 4, kWrite64 = 5, kBarrier = 6;
  size_t count() const { return v.size() / kWordsPerOp; }
  uint32_t op(size_t i) const { return static_cast<uint32_t>(v[i * kWordsPerOp]); }
  uint32_t flags(size_t i) const { return static_cast<uint32_t>(v[i * kWordsPerOp] >> 32); }
  uint64_t ptr(size_t i) const { return v[i * kWordsPerOp + 1]; }
  uint64_t value(size_t i) const { return v[i * kWordsPerOp + 2]; }
  // The bytes the operation reads or writes: 4, 8, or 0 (a flush or a barrier touches no word).
  uint32_t bytes(size_t i) const {
    uint32_t o = op(i);
    return o == kWait32 || o == kWrite32 ? 4 : o == kWait64 || o == kWrite64 ? 8 : 0;
  }
  void add(uint32_t op, uint32_t flags, uint64_t ptr, uint64_t value) {
    v.insert(v.end(), {uint64_t{op} | uint64_t{flags} << 32, ptr, value});
  }
  GPOOL_WIRE_FIELDS(v)
};

// A reserved virtual address range (cuMemAddressReserve). Created<VaRange> records it; Released<VaRange>
// must name a whole reservation with nothing mapped in it.
struct VaRange {
  uint64_t ptr = 0, size = 0;
  GPOOL_WIRE_FIELDS(ptr, size)
};
// cuMemMap: [ptr, ptr+size) of one reservation, not mapped yet, gets bytes [offset, offset+size) of a
// physical allocation; the range is then device memory the client may copy to and from.
struct VaMap {
  uint64_t ptr = 0, size = 0, offset = 0;
  Physical physical;
  GPOOL_WIRE_FIELDS(ptr, size, offset, physical)
};
// cuMemUnmap: [ptr, ptr+size) in one reservation, covering whole mappings only.
struct VaUnmap {
  uint64_t ptr = 0, size = 0;
  GPOOL_WIRE_FIELDS(ptr, size)
};

// cuMemSetAccess: [ptr, ptr+size) in one reservation, every byte of it mapped.
struct VaMapped {
  uint64_t ptr = 0, size = 0;
  GPOOL_WIRE_FIELDS(ptr, size)
};

// Shared page-locked host memory (issue 13; server/worker/host_pool.h), on a shared-memory connection.
// The window: where the client mapped the worker's pool segment, all of it; the worker maps it at the same
// address, so a kernel and a copy reach the client's bytes there. Set once per connection.
struct HostWindow {
  uint64_t base = 0, bytes = 0;
  GPOOL_WIRE_FIELDS(base, bytes)
};
// Pages of the window the client allocated as page-locked memory: page-aligned, inside the window, apart
// from every other range; once registered they are memory the client's copies and kernels may name.
struct HostRange {
  uint64_t ptr = 0, bytes = 0;
  GPOOL_WIRE_FIELDS(ptr, bytes)
};
// Where another worker of the client's lease has its pool (as the client mapped it): this worker keeps
// those addresses free of its own memory, so that no device address of one device is another's
// page-locked host memory in the client (which maps every pool). Page-aligned, in user space.
struct KeptFree {
  uint64_t base = 0, bytes = 0;
  GPOOL_WIRE_FIELDS(base, bytes)
};
// A registered HostRange, by its start, that the call ends.
struct HostRangeBase {
  uint64_t ptr = 0;
  GPOOL_WIRE_FIELDS(ptr)
};

// JIT options (CUjit_option) with their values. Only options whose value is a number are accepted:
// an option the driver reads as a pointer would have it read the worker's memory at a client's address.
struct JitOptions {
  std::vector<uint32_t> ids;
  std::vector<uint64_t> values;
  GPOOL_WIRE_FIELDS(ids, values)
  static constexpr uint32_t kMaxOptions = 64;
  // CU_JIT_MAX_REGISTERS .. CU_JIT_SPLIT_COMPILE, less the log buffers, wall time and symbol arrays.
  static bool numeric(uint32_t id) {
    return id <= 1 || (id >= 7 && id <= 14) || id == 16 || (id >= 20 && id <= 24) || (id >= 29 && id <= 34);
  }
};

// Request field of TensorMapEncode: a TMA descriptor's shape. Checked once against its rank, so that the
// backends may read every vector as the rank says: rank 1 to 5; dims and element strides one per dimension,
// strides one fewer; kind 0 (tiled): a box dimension per dimension; kind 1 (im2col): rank 3 or more, and
// lower and upper corners for all but two dimensions. The driver checks the values.
struct TensorMapShape {
  uint32_t kind = 0, dtype = 0, rank = 0;
  uint64_t address = 0;
  std::vector<uint64_t> dims, strides;
  std::vector<uint32_t> box;
  std::vector<int32_t> lower, upper;
  uint32_t channels = 0, pixels = 0;
  std::vector<uint32_t> estrides;
  GPOOL_WIRE_FIELDS(kind, dtype, rank, address, dims, strides, box, lower, upper, channels, pixels, estrides)
  bool consistent() const {
    if (rank < 1 || rank > 5 || dims.size() != rank || strides.size() != rank - 1 || estrides.size() != rank) return false;
    if (kind == 0) return box.size() == rank;
    return kind == 1 && rank >= 3 && lower.size() == rank - 2 && upper.size() == rank - 2;
  }
};

// Green contexts (SM partitions the program makes of its device). A green context of this worker's.
using GreenCtx = Handle<HandleKind::kGreenCtx>;
// The SMs a partition is made from: the device's all (0) or a green context's of this worker's.
struct SmSource : Handle<HandleKind::kGreenCtx> {
  using Handle::Handle;
};
// How a source's SMs are split, as cuDevSmResourceSplitByCount splits them: into at most `groups` groups
// of at least `min_count` SMs each (0 groups: not split, the source whole).
struct SmSplit {
  static constexpr uint32_t kMaxGroups = 1024;  // more than any GPU's SMs
  static constexpr uint32_t kRemainder = 0xffffffff;  // GreenCtxCreate's part: the split's remainder
  uint32_t groups = 0, flags = 0, min_count = 0;
  GPOOL_WIRE_FIELDS(groups, flags, min_count)
};

// Request field of a context reset: when the call succeeds, everything this worker handed out has ended
// but libraries and their kernels, and the lease's memory is all free again. Nothing on the wire.
struct ResetAll {
  auto wireFields() { return std::tuple<>(); }
  auto wireFields() const { return std::tuple<>(); }
};

// Request field: the base of a live allocation of this client's (not freed by the call).
struct AllocBase {
  uint64_t ptr = 0;
  AllocBase() = default;
  AllocBase(uint64_t p) : ptr(p) {}  // NOLINT
  GPOOL_WIRE_FIELDS(ptr)
};
// Reply field: another process's memory, opened through IPC; usable in ranges until closed, and not
// charged to this lease (its owner's lease pays for it).
struct IpcMapping {
  uint64_t ptr = 0, bytes = 0;
  GPOOL_WIRE_FIELDS(ptr, bytes)
};
// Reply field: physical memory another process exported (cuMemImportFromShareableHandle), usable as a
// Physical of this worker's (mapped, released) and not charged to this lease: its exporter's lease pays.
struct ImportedPhysical {
  Physical handle;
  uint64_t bytes = 0;
  GPOOL_WIRE_FIELDS(handle, bytes)
};
// Request field: the base of memory opened through IPC, which the call closes.
struct IpcMapped {
  uint64_t ptr = 0;
  IpcMapped() = default;
  IpcMapped(uint64_t p) : ptr(p) {}  // NOLINT
  GPOOL_WIRE_FIELDS(ptr)
};

// Request field: a memory pool attribute to set (CUmemPool_attribute 1..8; int-valued ones carry their
// int in `value`). The release threshold is lowered to the lease's limit: a pool never keeps more freed
// memory cached than the lease may hold.
struct PoolAttribute {
  uint32_t attr = 0;
  uint64_t value = 0;
  GPOOL_WIRE_FIELDS(attr, value)
};

// Request field: bytes of device memory the call allocates; counted against the lease's memory before
// the backend runs (CUDA_ERROR_OUT_OF_MEMORY past it).
struct AllocBytes {
  uint64_t bytes = 0;
  AllocBytes() = default;
  AllocBytes(uint64_t b) : bytes(b) {}  // NOLINT
  operator uint64_t() const { return bytes; }
  GPOOL_WIRE_FIELDS(bytes)
};
// Reply field: the allocation a call made (its base and size), now the client's.
struct NewAlloc {
  uint64_t ptr = 0, bytes = 0;
  GPOOL_WIRE_FIELDS(ptr, bytes)
};
// Request field: the base of a live allocation this call frees (never a module global or an interior
// pointer); its bytes return to the lease when the call succeeds.
struct FreedAlloc {
  uint64_t ptr = 0;
  FreedAlloc() = default;
  FreedAlloc(uint64_t p) : ptr(p) {}  // NOLINT
  operator uint64_t() const { return ptr; }
  GPOOL_WIRE_FIELDS(ptr)
};
// Reply field: a stream's capture: its CUstreamCaptureStatus and id, the graph it builds and the nodes the
// stream's next work will follow (with each one's CUgraphNodeType). The worker records the graph (for as long as the capture lasts, should it
// end invalidated) and those nodes as that graph's, so the client may add nodes and edges to it.
struct CaptureState {
  uint32_t status = 0;
  uint64_t id = 0;
  Graph graph;
  GraphNodes deps;
  std::vector<uint32_t> types;
  GPOOL_WIRE_FIELDS(status, id, graph, deps, types)
};
// User objects (server/worker/user_object_refs.h): a new object's references (1..INT_MAX), and references
// added to or given back by their holder: the client, or the graph the call names (`move`: the graph takes
// them from the client's). Nobody gives back more than it holds.
using UserObject = Handle<HandleKind::kUserObject>;
struct NewRefs {
  uint32_t count = 0;
  NewRefs() = default;
  NewRefs(uint32_t c) : count(c) {}  // NOLINT
  GPOOL_WIRE_FIELDS(count)
};
struct RefsAdded {
  UserObject obj;
  uint32_t count = 0, move = 0;
  GPOOL_WIRE_FIELDS(obj, count, move)
};
struct RefsReleased {
  UserObject obj;
  uint32_t count = 0;
  GPOOL_WIRE_FIELDS(obj, count)
};
// Graph memory (graph_memory.h): the size of a graph's allocation node (request), the address and size
// the node allocates at each launch (reply), and the graph allocation a free node frees (request). An
// allocation node holds no memory until its graph runs: the lease is charged what the device reserves for
// graphs, not the node's size.
struct GraphAllocBytes {
  uint64_t bytes = 0;
  GraphAllocBytes() = default;
  GraphAllocBytes(uint64_t b) : bytes(b) {}  // NOLINT
  GPOOL_WIRE_FIELDS(bytes)
};
struct GraphAlloc {
  uint64_t ptr = 0, bytes = 0;
  GPOOL_WIRE_FIELDS(ptr, bytes)
};
struct GraphFreed {
  uint64_t ptr = 0;
  GraphFreed() = default;
  GraphFreed(uint64_t p) : ptr(p) {}  // NOLINT
  GPOOL_WIRE_FIELDS(ptr)
};
// Reply field: a module global's address and size; copies to and from it are legitimate until its
// module is unloaded. Not counted against the lease.
struct ModuleGlobal {
  uint64_t ptr = 0, bytes = 0;
  GPOOL_WIRE_FIELDS(ptr, bytes)
};
// Request field: an address inside a live allocation or global (CUDA_ERROR_INVALID_VALUE otherwise).
struct DevAddress {
  uint64_t ptr = 0;
  DevAddress() = default;
  DevAddress(uint64_t p) : ptr(p) {}  // NOLINT
  GPOOL_WIRE_FIELDS(ptr)
};
// Reply field: the module (kind 0) or library (kind 1) that the request's function or kernel came from;
// the worker fills it in from its table.
struct OwnerOf : ModuleRef {};
// Request field: addresses the client just freed that it had taken for graph allocations (allocated while
// a capture ran); the reply's GoneAllocations names those that were not, or are no longer, graph memory.
struct FreedAddresses {
  std::vector<uint64_t> v;
  GPOOL_WIRE_FIELDS(v)
};
// Reply field: graph allocations' addresses that stopped being the client's since it last asked (no graph
// holds their node and none is live), and the request's FreedAddresses that are no graph memory; the worker
// fills it in from its graph memory (graph_memory.h).
struct GoneAllocations {
  std::vector<uint64_t> v;
  GPOOL_WIRE_FIELDS(v)
};
// Reply field: the allocation or global that contains the request's DevAddress; the worker fills it in.
struct RangeOf {
  uint64_t base = 0, bytes = 0;
  GPOOL_WIRE_FIELDS(base, bytes)
};
// Reply field: device memory as the lease sees it. The backend reports the device; the worker lowers
// total to the lease's limit and free to what the lease has left.
struct MemView {
  uint64_t free = 0, total = 0;
  GPOOL_WIRE_FIELDS(free, total)
};

}  // namespace gpool::proto
