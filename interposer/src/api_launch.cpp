// Kernel launches: parameters are packed into one buffer with the layout the worker reported (cached
// per function), and the launch goes out fire-and-forget.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cross_device.h"
#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;
using gpool::proto::Blob;

namespace {

thread_local std::vector<uint8_t> t_params;

CUresult packParams(uint64_t f, void** params, void** extra, Blob& out) {
  if (extra) {
    // {CU_LAUNCH_PARAM_BUFFER_POINTER, p, CU_LAUNCH_PARAM_BUFFER_SIZE, &n, CU_LAUNCH_PARAM_END}
    void* buffer = nullptr;
    size_t* size = nullptr;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = static_cast<size_t*>(extra[i + 1]);
      else return CUDA_ERROR_INVALID_VALUE;
    }
    if (params || !buffer || !size) return CUDA_ERROR_INVALID_VALUE;
    out = Blob{buffer, *size};
    return CUDA_SUCCESS;
  }
  State::ParamLayout layout;
  if (CUresult r = State::get().paramLayout(f, layout)) return r;
  size_t total = 0;
  for (size_t i = 0; i + 1 < layout->size(); i += 2) total = std::max<size_t>(total, (*layout)[i] + (*layout)[i + 1]);
  if (total && !params) return CUDA_ERROR_INVALID_VALUE;
  t_params.assign(total, 0);
  for (size_t i = 0, p = 0; i + 1 < layout->size(); i += 2, ++p)
    std::memcpy(t_params.data() + (*layout)[i], params[p], (*layout)[i + 1]);
  out = Blob{t_params.data(), total};
  return CUDA_SUCCESS;
}

// A kernel that received a pointer into the client's host memory (cuMemHostAlloc, cuMemHostRegister,
// cuMemHostGetDevicePointer) would dereference it on a GPU in another process, maybe another machine.
// Memory in the pool the worker of connection `reaching` shares (host_pool.h) is its to reach; for any
// other, refuse the launch and say why, instead of letting the kernel fault or read the wrong memory.
CUresult refuseHostPointers(const char* call, uint64_t f, Blob packed, int reaching) {
  State& st = State::get();
  if (st.host_allocations == 0) return CUDA_SUCCESS;
  size_t word = 0;
  uint64_t v = st.firstHostPointer(static_cast<const uint8_t*>(packed.data), packed.size / 8, word, reaching);
  if (v == 0) return CUDA_SUCCESS;
  GPOOL_LOG(Level::kError,
            "%s: kernel %#llx was given host memory %#llx (parameter bytes %zu..%zu, from cuMemHostAlloc or "
            "cuMemHostRegister) that its GPU cannot reach: only cuMemHostAlloc memory of a client on the GPU's "
            "own host (shared memory) is mapped for kernels; copy the data to device memory first (returning "
            "CUDA_ERROR_NOT_SUPPORTED)",
            call, (unsigned long long)f, (unsigned long long)v, 8 * word, 8 * word + 7);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

// A kernel launch as a graph node holds it (api_graph_build.cpp): parameters packed into `storage`.
CUresult gpool::client::packKernelCall(uint64_t f, const unsigned grid[3], const unsigned block[3], unsigned shared,
                                       void** params, void** extra, int reaching, gpool::proto::KernelCall& out,
                                       std::vector<uint8_t>& storage) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  Blob packed;
  if (CUresult r = packParams(f, params, extra, packed)) return r;
  if (CUresult r = refuseHostPointers("a kernel graph node", f, packed, reaching)) return r;
  storage.assign(static_cast<const uint8_t*>(packed.data), static_cast<const uint8_t*>(packed.data) + packed.size);
  out = gpool::proto::KernelCall{f, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, Blob{storage.data(), storage.size()}};
  return CUDA_SUCCESS;
}

namespace {

// In a lease of several devices, events named by launch attributes are marked with their device
// (handle_tags.h): the worker gets its own values, and another device's event is refused.
CUresult ownAttributeEvents(const Connection* conn, const CUlaunchAttribute* attrs, unsigned n, std::vector<CUlaunchAttribute>& own) {
  own.assign(attrs, attrs + n);
  for (CUlaunchAttribute& a : own) {
    CUevent* e = a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT       ? &a.value.programmaticEvent.event
                 : a.id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT ? &a.value.launchCompletionEvent.event
                                                                       : nullptr;
    if (!e) continue;
    auto v = reinterpret_cast<uint64_t>(*e);
    if (tags::owner(v) >= 0 && tags::owner(v) != conn->index()) return CUDA_ERROR_INVALID_HANDLE;
    *e = reinterpret_cast<CUevent>(tags::strip(v));
  }
  return CUDA_SUCCESS;
}

// CUDA_LAUNCH_BLOCKING=1, which PyTorch's errors advise for finding the kernel that failed: the driver
// makes every launch synchronous. The worker's driver never sees this process's environment, so the
// client waits for the launch's stream itself and returns what the wait says, unless a capture is under
// way (a launch then only records into a graph, and a wait could end the capture).
bool launchBlocking() {
  static const bool on = [] {
    const char* v = std::getenv("CUDA_LAUNCH_BLOCKING");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

CUresult waitIfBlocking(Connection* conn, uint64_t stream, CUresult launched) {
  if (launched != CUDA_SUCCESS || !launchBlocking() || State::get().active_captures != 0) return launched;
  return synchronizeOn(conn, stream);
}

// Where a launch runs, by cuLaunchKernel's rules: a library's kernel (CUkernel) in its stream's context, or
// the current one for a default stream (it maps to that device's copy, cross_device.h); a function
// (CUfunction) in its own device's context, so on a default stream that device's, and another device's
// stream is refused.
Connection* launchConnection(uint64_t f, uint64_t stream, CUresult& err) {
  State& state = State::get();
  if (state.connections() < 2) return state.readyInContext(err);
  int of_stream = tags::owner(stream), of_function = tags::owner(f);
  if (of_function >= 0 && !crossDevice().isKernel(f)) {
    if (of_stream >= 0 && of_stream != of_function) {
      GPOOL_LOG(Level::kError, "a launch of device %d's function %#llx on device %d's stream: a CUfunction runs only "
                "in its own context; launch the kernel (CUkernel) there, or the function got on that device "
                "(returning CUDA_ERROR_INVALID_HANDLE)", state.deviceOfConnection(of_function), (unsigned long long)f,
                state.deviceOfConnection(of_stream));
      err = CUDA_ERROR_INVALID_HANDLE;
      return nullptr;
    }
    return state.readyOn(of_function, err);
  }
  return of_stream >= 0 ? state.readyOn(of_stream, err) : state.readyInContext(err);
}
// As GPOOL_CONN (state.h), for the connection a launch of `f` on `stream` runs on.
#define GPOOL_CONN_OF_LAUNCH(c, f, stream)                              \
  CUresult gpool_err_ = CUDA_SUCCESS;                                   \
  Connection* c = launchConnection((f), (stream), gpool_err_);          \
  if (!c) return gpool_err_

CUresult launch(uint64_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared,
                uint64_t stream, void** params, void** extra, const CUlaunchAttribute* attrs, unsigned nattrs,
                const char* call) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  GPOOL_CONN_OF_LAUNCH(conn, f, stream);
  if (CUresult r = managedBeforeDeviceWork()) return r;
  Blob packed;
  if (CUresult r = packParams(f, params, extra, packed)) return r;
  if (CUresult r = refuseHostPointers(call, f, packed, conn->index())) return r;
  std::vector<CUlaunchAttribute> own;
  if (nattrs && State::get().connections() > 1) {
    if (CUresult r = ownAttributeEvents(conn, attrs, nattrs, own)) return r;
    attrs = own.data();
  }
  Blob a{attrs, nattrs * sizeof(CUlaunchAttribute)};
  return waitIfBlocking(conn, stream, static_cast<CUresult>(conn->post<calls::LaunchKernel>(f, gx, gy, gz, bx, by, bz, shared, stream, packed, a)));
}

CUresult launchEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra, bool per_thread) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  return launch(reinterpret_cast<uint64_t>(f), c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                c->blockDimZ, c->sharedMemBytes, streamArg(c->hStream, per_thread), params, extra, c->attrs,
                c->attrs ? c->numAttrs : 0, "cuLaunchKernelEx");
}

}  // namespace

GPOOL_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                     unsigned bz, unsigned shared, CUstream s, void** params, void** extra) {
  GPOOL_TRY
  return launch(reinterpret_cast<uint64_t>(f), gx, gy, gz, bx, by, bz, shared, streamArg(s, false), params, extra, nullptr, 0, "cuLaunchKernel");
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                          unsigned bz, unsigned shared, CUstream s, void** params, void** extra) {
  GPOOL_TRY
  return launch(reinterpret_cast<uint64_t>(f), gx, gy, gz, bx, by, bz, shared, streamArg(s, true), params, extra, nullptr, 0, "cuLaunchKernel");
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  GPOOL_TRY return launchEx(c, f, params, extra, false); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  GPOOL_TRY return launchEx(c, f, params, extra, true); GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction f, int block_size,
                                                                         size_t smem, unsigned int flags) {
  GPOOL_TRY
  if (!blocks) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_LAUNCH(conn, reinterpret_cast<uint64_t>(f), 0);  // (the device a launch on a default stream runs on)
  const State::OccupancyKey key{reinterpret_cast<uint64_t>(f), block_size, uint64_t{smem}, flags, conn->index()};
  if (State::get().occupancy(key, *blocks)) return CUDA_SUCCESS;
  std::tuple<int32_t> r;
  int st = conn->call<calls::OccupancyMaxActiveBlocks>(r, reinterpret_cast<uint64_t>(f), int32_t{block_size}, uint64_t{smem}, flags);
  *blocks = std::get<0>(r);
  if (st == CUDA_SUCCESS) State::get().keepOccupancy(key, *blocks);
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction f, int block_size, size_t smem) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, block_size, smem, 0);
}

GPOOL_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, CUfunction f, int blocks, int block_size) {
  GPOOL_TRY
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_LAUNCH(conn, reinterpret_cast<uint64_t>(f), 0);
  std::tuple<uint64_t> r;
  int st = conn->call<calls::OccupancyAvailableDynamicSMem>(r, reinterpret_cast<uint64_t>(f), int32_t{blocks}, int32_t{block_size});
  *bytes = std::get<0>(r);
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

// A launch shape's cluster question, asked of the worker.
namespace {
template <typename Call>
CUresult clusterQuestion(int* answer, CUfunction f, const CUlaunchConfig* c) {
  if (!answer || !c) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_LAUNCH(conn, reinterpret_cast<uint64_t>(f), streamArg(c->hStream, false));  // (where it would run)
  std::tuple<int32_t> r;
  Blob attrs{c->attrs, c->attrs ? c->numAttrs * sizeof(CUlaunchAttribute) : 0};
  int st = conn->call<Call>(r, reinterpret_cast<uint64_t>(f), c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                            c->blockDimZ, c->sharedMemBytes, attrs);
  *answer = std::get<0>(r);
  return static_cast<CUresult>(st);
}
}  // namespace
GPOOL_EXPORT CUresult cuOccupancyMaxActiveClusters(int* clusters, CUfunction f, const CUlaunchConfig* c) {
  GPOOL_TRY return clusterQuestion<calls::OccupancyMaxActiveClusters>(clusters, f, c); GPOOL_CATCH
}

// The block size with the most resident threads per SM, and the grid that fills the device with it, as
// the runtime's cudaOccupancyMaxPotentialBlockSize computes them: each block size (a multiple of the warp)
// from the largest the function takes down, its dynamic shared memory from `smem_of` when given. Each
// occupancy answer is kept (above), so asking again costs no round trip.
namespace {
CUresult potentialBlockSize(int* grid, int* block, CUfunction f, CUoccupancyB2DSize smem_of, size_t smem, int limit, unsigned flags) {
  if (!grid || !block) return CUDA_ERROR_INVALID_VALUE;
  int most = 0;
  if (CUresult r = State::get().functionAttribute(reinterpret_cast<uint64_t>(f), CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, most)) return r;
  const CUdevice d = State::get().currentDevice();
  const int warp = std::max(1, State::get().attribute(d, CU_DEVICE_ATTRIBUTE_WARP_SIZE));
  const int per_sm = State::get().attribute(d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  if (limit > 0) most = std::min(most, limit);
  int best_threads = 0, best_block = 0, best_blocks = 0;
  for (int size = most / warp * warp; size > 0; size -= warp) {
    int blocks = 0;
    size_t bytes = smem_of ? smem_of(size) : smem;
    if (CUresult r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, size, bytes, flags)) return r;
    if (blocks * size > best_threads) best_threads = blocks * size, best_block = size, best_blocks = blocks;
    if (best_threads >= per_sm) break;  // a full SM: no smaller block does better
  }
  *block = best_block;
  *grid = best_blocks * State::get().attribute(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  return CUDA_SUCCESS;
}
}  // namespace
GPOOL_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int* grid, int* block, CUfunction f, CUoccupancyB2DSize smem_of, size_t smem,
                                                       int limit) {
  GPOOL_TRY return potentialBlockSize(grid, block, f, smem_of, smem, limit, 0); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* grid, int* block, CUfunction f, CUoccupancyB2DSize smem_of,
                                                                size_t smem, int limit, unsigned flags) {
  GPOOL_TRY return potentialBlockSize(grid, block, f, smem_of, smem, limit, flags); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuOccupancyMaxPotentialClusterSize(int* size, CUfunction f, const CUlaunchConfig* c) {
  GPOOL_TRY return clusterQuestion<calls::OccupancyMaxPotentialClusterSize>(size, f, c); GPOOL_CATCH
}

// TMA descriptors: the 128-byte layout is the driver's secret, so the worker's driver encodes them. The
// descriptor holds the device address, which is the worker's real address, valid as a kernel argument.
namespace {
CUresult tensorMap(CUtensorMap* out, uint32_t kind, CUtensorMapDataType dt, cuuint32_t rank, void* address,
                   const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box, const int* lower,
                   const int* upper, cuuint32_t channels, cuuint32_t pixels, const cuuint32_t* estrides,
                   CUtensorMapInterleave il, CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  if (!out || rank < 1 || rank > 5 || !dims || !estrides || (rank > 1 && !strides) || (kind == 0 && !box) ||
      (kind == 1 && (rank < 3 || !lower || !upper)))
    return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  gpool::proto::TensorMapShape t;
  t.kind = kind;
  t.dtype = dt;
  t.rank = rank;
  t.address = reinterpret_cast<uint64_t>(address);
  t.dims.assign(dims, dims + rank);
  t.strides.assign(strides, strides + (rank - 1));
  if (kind == 0) t.box.assign(box, box + rank);
  else t.lower.assign(lower, lower + rank - 2), t.upper.assign(upper, upper + rank - 2);
  t.channels = channels;
  t.pixels = pixels;
  t.estrides.assign(estrides, estrides + rank);
  std::tuple<std::vector<uint8_t>> r;
  int st = conn->call<calls::TensorMapEncode>(r, t, uint32_t{il}, uint32_t{sw}, uint32_t{l2}, uint32_t{oob});
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  if (std::get<0>(r).size() != sizeof *out) return CUDA_ERROR_UNKNOWN;
  std::memcpy(out, std::get<0>(r).data(), sizeof *out);
  return CUDA_SUCCESS;
}
}  // namespace

GPOOL_EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap* out, CUtensorMapDataType dt, cuuint32_t rank, void* address,
                                             const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                             const cuuint32_t* estrides, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                             CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  GPOOL_TRY
  return tensorMap(out, 0, dt, rank, address, dims, strides, box, nullptr, nullptr, 0, 0, estrides, il, sw, l2, oob);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuTensorMapEncodeIm2col(CUtensorMap* out, CUtensorMapDataType dt, cuuint32_t rank, void* address,
                                              const cuuint64_t* dims, const cuuint64_t* strides, const int* lower,
                                              const int* upper, cuuint32_t channels, cuuint32_t pixels,
                                              const cuuint32_t* estrides, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                              CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  GPOOL_TRY
  return tensorMap(out, 1, dt, rank, address, dims, strides, nullptr, lower, upper, channels, pixels, estrides, il, sw, l2, oob);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuTensorMapReplaceAddress(CUtensorMap* map, void* address) {
  GPOOL_TRY
  if (!map) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  std::vector<uint8_t> in(reinterpret_cast<const uint8_t*>(map), reinterpret_cast<const uint8_t*>(map) + sizeof *map);
  std::tuple<std::vector<uint8_t>> r;
  int st = conn->call<calls::TensorMapReplaceAddress>(r, in, reinterpret_cast<uint64_t>(address));
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  if (std::get<0>(r).size() != sizeof *map) return CUDA_ERROR_UNKNOWN;
  std::memcpy(map, std::get<0>(r).data(), sizeof *map);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// A cooperative launch is a launch with the cooperative attribute (all blocks resident at once, so the
// grid may synchronise); the worker's driver checks that the grid fits.
namespace {
CUresult launchCooperative(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           unsigned shared, uint64_t stream, void** params) {
  CUlaunchAttribute coop{};
  coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  coop.value.cooperative = 1;
  return launch(reinterpret_cast<uint64_t>(f), gx, gy, gz, bx, by, bz, shared, stream, params, nullptr, &coop, 1,
                "cuLaunchCooperativeKernel");
}
}  // namespace
GPOOL_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                                unsigned bz, unsigned shared, CUstream s, void** params) {
  GPOOL_TRY return launchCooperative(f, gx, gy, gz, bx, by, bz, shared, streamArg(s, false), params); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                                     unsigned bz, unsigned shared, CUstream s, void** params) {
  GPOOL_TRY return launchCooperative(f, gx, gy, gz, bx, by, bz, shared, streamArg(s, true), params); GPOOL_CATCH
}
