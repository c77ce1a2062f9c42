// Green contexts: partitions of a device's SMs that the program makes and runs streams in (PyTorch's
// GreenContext, FlashInfer, SGLang). The worker's driver makes them; here a CUdevResource is a recipe the
// worker can follow again (the source: the device or a green context; the split; which of its parts),
// kept in the structure's internal bytes beside the SM counts the worker answered. A descriptor is that
// recipe's parts, and a green context is a Context of its own (CUgreenCtx and its CUcontext are the same
// value) whose default stream is a stream of the worker's green context (state.h, streamArg).
#include <atomic>
#include <cstring>
#include <list>
#include <mutex>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;
using gpool::proto::SmSplit;

namespace {

// What a CUdevResource of this library's holds in its internal bytes.
struct Recipe {
  static constexpr uint32_t kMagic = 0x4d537067;  // "gpSM"
  uint32_t magic = kMagic;
  int32_t device = 0;
  uint64_t source = 0;   // the worker's green context, or 0: the device's SMs
  uint64_t split_id = 0;  // the split it is a part of (one number per cuDevSmResourceSplitByCount), 0: none
  SmSplit split;
  uint32_t part = 0;  // a group's index, SmSplit::kRemainder, or 0 (not split)
};
static_assert(sizeof(Recipe) <= sizeof(CUdevResource::_internal_padding));

std::atomic<uint64_t> g_next_split{1};

Context* greenOf(CUgreenCtx g) {
  auto c = reinterpret_cast<CUcontext>(g);
  if (!g || !State::get().isContext(c)) return nullptr;
  auto* ctx = reinterpret_cast<Context*>(c);
  return ctx->green ? ctx : nullptr;
}

void writeResource(CUdevResource& out, const Recipe& r, const uint32_t* sm) {
  std::memset(&out, 0, sizeof out);
  out.type = CU_DEV_RESOURCE_TYPE_SM;
  std::memcpy(out._internal_padding, &r, sizeof r);
  out.sm.smCount = sm[0];
  out.sm.minSmPartitionSize = sm[1];
  out.sm.smCoscheduledAlignment = sm[2];
}

CUresult readResource(const CUdevResource* in, Recipe& r) {
  if (!in) return CUDA_ERROR_INVALID_VALUE;
  if (in->type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  std::memcpy(&r, in->_internal_padding, sizeof r);
  return r.magic == Recipe::kMagic && State::get().device(r.device) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// The worker's parts of `source` split as `split` says: three numbers each, the groups and then the remainder.
CUresult askParts(CUdevice d, uint64_t source, SmSplit split, std::vector<uint32_t>& parts) {
  GPOOL_CONN_OF_DEVICE(conn, d);
  std::tuple<std::vector<uint32_t>> out;
  if (int st = conn->call<calls::SmResourceSplit>(out, source, split)) return static_cast<CUresult>(st);
  parts = std::move(std::get<0>(out));
  return parts.empty() || parts.size() % 3 ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
}

// The SMs of a device or a green context, whole.
CUresult wholeResource(CUdevice d, uint64_t source, CUdevResource* out, CUdevResourceType type) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  std::vector<uint32_t> parts;
  if (CUresult r = askParts(d, source, SmSplit{}, parts)) return r;
  Recipe recipe;
  recipe.device = d;
  recipe.source = source;
  writeResource(*out, recipe, parts.data());
  return CUDA_SUCCESS;
}

// A descriptor (cuDevResourceGenerateDesc): parts of one split of one source. The driver has no call that
// frees one, so they stay, as they do there.
struct Descriptor {
  Recipe recipe;  // (its part unused)
  std::vector<uint32_t> parts;
};
std::mutex g_descs_mu;
std::list<Descriptor> g_descs;  // stable addresses: a CUdevResourceDesc is one
std::unordered_set<const void*> g_desc_handles;

const Descriptor* descriptorOf(CUdevResourceDesc d) {
  std::lock_guard lock(g_descs_mu);
  return g_desc_handles.count(d) ? reinterpret_cast<const Descriptor*>(d) : nullptr;
}

// Makes the worker's green context of `desc` on device `d`, with the stream that stands for its default one.
CUresult makeGreen(const Descriptor& desc, CUdevice d, unsigned flags, CUgreenCtx* out) {
  GPOOL_CONN_OF_DEVICE(conn, d);
  calls::GreenCtxCreate::out::tuple made;
  const Recipe& r = desc.recipe;
  if (int st = conn->call<calls::GreenCtxCreate>(made, r.source, r.split, desc.parts, uint32_t{flags})) return static_cast<CUresult>(st);
  CUcontext c = State::get().createContext(d, 0);
  auto* ctx = reinterpret_cast<Context*>(c);
  ctx->green = std::get<0>(made).v;
  CUstream stream = nullptr;
  std::vector<uint32_t> whole;
  CUresult res = cuGreenCtxStreamCreate(&stream, reinterpret_cast<CUgreenCtx>(c), CU_STREAM_NON_BLOCKING, 0);
  if (res == CUDA_SUCCESS) res = askParts(d, ctx->green, SmSplit{}, whole);
  if (res != CUDA_SUCCESS) {
    if (stream) cuStreamDestroy_v2(stream);
    conn->call<calls::GreenCtxDestroy>(ctx->green);
    State::get().destroyContext(c);
    return res;
  }
  ctx->green_stream = reinterpret_cast<uint64_t>(stream);
  ctx->green_sms = whole[0];
  *out = reinterpret_cast<CUgreenCtx>(c);
  return CUDA_SUCCESS;
}

}  // namespace

namespace gpool::client {
bool greenOfStream(uint64_t s, CUcontext& green) {
  green = nullptr;
  if (s <= reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD)) {
    CUcontext c = State::get().current();
    if (c && reinterpret_cast<const Context*>(c)->green) green = c;
    return true;
  }
  State::StreamInfo info{0, 0};
  if (!State::get().streamInfo(s, info)) return false;
  green = info.green;
  return true;
}

// Streams of a green context never wait for its default stream: the driver requires that of
// cuGreenCtxStreamCreate's, and the default stream stands in for the green context's own (state.h).
bool greenStreamCreate(CUstream* s, unsigned flags, int priority, CUresult& result) {
  CUcontext c = State::get().current();
  const Context* ctx = reinterpret_cast<const Context*>(c);
  if (!ctx || !ctx->green) return false;
  result = cuGreenCtxStreamCreate(s, reinterpret_cast<CUgreenCtx>(c), flags | CU_STREAM_NON_BLOCKING, priority);
  return true;
}
}  // namespace gpool::client

GPOOL_EXPORT CUresult cuDeviceGetDevResource(CUdevice d, CUdevResource* resource, CUdevResourceType type) {
  GPOOL_TRY
  CUresult err;
  if (!State::get().ready(err)) return err;
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  return wholeResource(d, 0, resource, type);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxGetDevResource(CUcontext c, CUdevResource* resource, CUdevResourceType type) {
  GPOOL_TRY
  if (!c) c = State::get().current();
  if (!c || !State::get().isContext(c)) return CUDA_ERROR_INVALID_CONTEXT;
  const auto* ctx = reinterpret_cast<const Context*>(c);
  return wholeResource(ctx->device, ctx->green, resource, type);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGreenCtxGetDevResource(CUgreenCtx g, CUdevResource* resource, CUdevResourceType type) {
  GPOOL_TRY
  const Context* ctx = greenOf(g);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  return wholeResource(ctx->device, ctx->green, resource, type);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDevSmResourceSplitByCount(CUdevResource* result, unsigned int* nbGroups, const CUdevResource* input,
                                                  CUdevResource* remaining, unsigned int useFlags, unsigned int minCount) {
  GPOOL_TRY
  Recipe in;
  if (!nbGroups) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = readResource(input, in)) return r;
  if (in.split_id) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;  // a part is split only once in a green context
  if (result && *nbGroups == 0) return CUDA_ERROR_INVALID_VALUE;
  Recipe out = in;
  out.split = SmSplit{std::min(result ? *nbGroups : SmSplit::kMaxGroups, SmSplit::kMaxGroups), useFlags, minCount};
  std::vector<uint32_t> parts;
  if (CUresult r = askParts(in.device, in.source, out.split, parts)) return r;
  const unsigned made = static_cast<unsigned>(parts.size() / 3 - 1);
  if (made > out.split.groups) return CUDA_ERROR_UNKNOWN;  // more than asked for: never written past `result`
  out.split_id = g_next_split++;
  for (unsigned i = 0; result && i < made; ++i) {
    out.part = i;
    writeResource(result[i], out, &parts[3 * i]);
  }
  out.part = SmSplit::kRemainder;
  if (remaining) writeResource(*remaining, out, &parts[3 * made]);
  *nbGroups = made;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDevResourceGenerateDesc(CUdevResourceDesc* desc, CUdevResource* resources, unsigned int n) {
  GPOOL_TRY
  if (!desc || !resources || n == 0) return CUDA_ERROR_INVALID_VALUE;
  Descriptor d;
  for (unsigned i = 0; i < n; ++i) {
    Recipe r;
    if (CUresult st = readResource(&resources[i], r)) return st;
    if (i == 0) d.recipe = r;
    // Parts of one split of one source only: the driver answers so for resources of two splits.
    const Recipe& first = d.recipe;
    if (r.device != first.device || r.source != first.source || r.split_id != first.split_id || (n > 1 && !r.split_id))
      return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    d.parts.push_back(r.part);
  }
  std::lock_guard lock(g_descs_mu);
  const Descriptor* made = &g_descs.emplace_back(std::move(d));
  g_desc_handles.insert(made);
  *desc = reinterpret_cast<CUdevResourceDesc>(const_cast<Descriptor*>(made));
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx* out, CUdevResourceDesc desc, CUdevice d, unsigned int flags) {
  GPOOL_TRY
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  if (!State::get().ready(err)) return err;
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  const Descriptor* made = descriptorOf(desc);
  if (!made) return CUDA_ERROR_INVALID_VALUE;
  if (made->recipe.device != d) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;  // another device's SMs
  return makeGreen(*made, d, flags, out);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx g) {
  GPOOL_TRY
  Context* ctx = greenOf(g);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  GPOOL_CONN_OF_DEVICE(conn, ctx->device);
  cuStreamDestroy_v2(reinterpret_cast<CUstream>(ctx->green_stream.load()));
  if (int st = conn->call<calls::GreenCtxDestroy>(ctx->green)) return static_cast<CUresult>(st);
  auto c = reinterpret_cast<CUcontext>(g);
  State::get().destroyContext(c);
  std::erase(State::ctxStack(), c);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxFromGreenCtx(CUcontext* c, CUgreenCtx g) {
  GPOOL_TRY
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (!greenOf(g)) return CUDA_ERROR_INVALID_CONTEXT;
  *c = reinterpret_cast<CUcontext>(g);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGreenCtxGetId(CUgreenCtx g, unsigned long long* id) {
  GPOOL_TRY
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  if (!g) g = reinterpret_cast<CUgreenCtx>(State::get().current());  // the current one, if green
  const Context* ctx = greenOf(g);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  *id = ctx->id;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuGreenCtxStreamCreate(CUstream* s, CUgreenCtx g, unsigned int flags, int priority) {
  GPOOL_TRY
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  const Context* ctx = greenOf(g);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  GPOOL_CONN_OF_DEVICE(conn, ctx->device);
  calls::GreenCtxStreamCreate::out::tuple made;
  if (int st = conn->call<calls::GreenCtxStreamCreate>(made, ctx->green, uint32_t{flags}, int32_t{priority}))
    return static_cast<CUresult>(st);
  *s = reinterpret_cast<CUstream>(std::get<0>(made).v);
  State::get().addStream(std::get<0>(made).v, {flags, priority, reinterpret_cast<CUcontext>(g)});
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// Its events are its context's (api_context.cpp).
GPOOL_EXPORT CUresult cuGreenCtxRecordEvent(CUgreenCtx g, CUevent e) {
  GPOOL_TRY return greenOf(g) ? cuCtxRecordEvent(reinterpret_cast<CUcontext>(g), e) : CUDA_ERROR_INVALID_CONTEXT; GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuGreenCtxWaitEvent(CUgreenCtx g, CUevent e) {
  GPOOL_TRY return greenOf(g) ? cuCtxWaitEvent(reinterpret_cast<CUcontext>(g), e) : CUDA_ERROR_INVALID_CONTEXT; GPOOL_CATCH
}

// The green context a stream was made in; for a default stream, the current context if it is green.
GPOOL_EXPORT CUresult cuStreamGetGreenCtx(CUstream s, CUgreenCtx* g) {
  GPOOL_TRY
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  CUcontext green = nullptr;
  if (!greenOfStream(reinterpret_cast<uint64_t>(s), green)) return CUDA_ERROR_INVALID_HANDLE;
  *g = reinterpret_cast<CUgreenCtx>(green);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
