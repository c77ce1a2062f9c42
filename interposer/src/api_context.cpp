// Contexts, all local: every context of a client, primary or created, maps to its worker's context on
// that device. Primary-context reference counts, created contexts, the per-thread current-context stack
// and flags live here. A primary-context reset (cudaDeviceReset) resets the worker's context.
#include <mutex>
#include <unordered_map>

#include "cross_device.h"
#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {
Context* ctxOf(CUcontext c) { return reinterpret_cast<Context*>(c); }
CUcontext handle(Context* c) { return reinterpret_cast<CUcontext>(c); }
}  // namespace

GPOOL_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice d) {
  GPOOL_TRY
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  if (!State::get().ready(err)) return err;
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = State::get().primary(d);
  std::lock_guard lock(State::get().mu);
  ++c->refs;
  *pctx = handle(c);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  GPOOL_TRY
  CUresult err;
  if (!State::get().ready(err)) return err;
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = State::get().primary(d);
  bool destroyed = false;
  {
    std::lock_guard lock(State::get().mu);
    if (c->refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    destroyed = --c->refs == 0;
  }
  if (destroyed) State::get().destroyLocalStorage(c);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int* flags, int* active) {
  GPOOL_TRY
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  if (!State::get().ready(err)) return err;
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = State::get().primary(d);
  std::lock_guard lock(State::get().mu);
  *flags = c->flags;
  *active = c->refs > 0;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int flags) {
  GPOOL_TRY
  CUresult err;
  if (!State::get().ready(err)) return err;
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(State::get().mu);
  State::get().primary(d)->flags = flags;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
  GPOOL_TRY
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  GPOOL_CONN_OF_DEVICE(conn, d);
  // Everything the client held on the device ends, on the worker and in this library's caches; the
  // lease's memory is all free again.
  if (int st = conn->call<gpool::proto::calls::CtxReset>(gpool::proto::ResetAll{})) return static_cast<CUresult>(st);
  State::get().forgetDeviceState(conn->index());
  crossDevice().forgetConnection(conn->index());
  forgetVirtualMemory(conn->index());
  forgetArrays();
  forgetTextures();
  forgetLinks();
  State::get().destroyLocalStorage(State::get().primary(d));
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  GPOOL_TRY
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = State::get().current();
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  GPOOL_TRY
  auto& stack = State::ctxStack();
  if (ctx && !State::get().isContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!ctx) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (stack.empty()) stack.push_back(ctx);
  else stack.back() = ctx;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  GPOOL_TRY
  if (!ctx || !State::get().isContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  State::ctxStack().push_back(ctx);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  GPOOL_TRY
  auto& stack = State::ctxStack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = stack.back();
  stack.pop_back();
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  GPOOL_TRY
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  CUcontext c = State::get().current();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctxOf(c)->device;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxGetFlags(unsigned int* flags) {
  GPOOL_TRY
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  CUcontext c = State::get().current();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  *flags = ctxOf(c)->flags;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxSetFlags(unsigned int flags) {
  GPOOL_TRY
  CUcontext c = State::get().current();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  ctxOf(c)->flags = flags;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  GPOOL_TRY
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) ctx = State::get().current();
  if (!ctx || !State::get().isContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *id = ctxOf(ctx)->id;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  GPOOL_TRY
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) ctx = State::get().current();
  if (!ctx || !State::get().isContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 3020;  // what the driver reports for contexts created through the current API
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

namespace {
// Waits for what the device `conn` serves was asked to do, then brings managed memory back as a sync does.
CUresult synchronize(gpool::client::Connection* conn) {
  int st = conn->call<gpool::proto::calls::CtxSynchronize>();
  return st == CUDA_SUCCESS ? managedAtSync() : static_cast<CUresult>(st);
}
}  // namespace

GPOOL_EXPORT CUresult cuCtxSynchronize() {
  GPOOL_TRY
  GPOOL_CONN(conn);
  return synchronize(conn);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  GPOOL_TRY
  GPOOL_CONN(conn);
  return static_cast<CUresult>(conn->call<gpool::proto::calls::CtxSetLimit>(static_cast<uint32_t>(limit), uint64_t{value}));
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  GPOOL_TRY
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  std::tuple<uint64_t> out;
  int st = conn->call<gpool::proto::calls::CtxGetLimit>(out, static_cast<uint32_t>(limit));
  *value = std::get<0>(out);
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  GPOOL_TRY
  if (least) *least = 0;
  if (greatest) *greatest = -5;  // what the driver reports on current GPUs
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache* config) {
  GPOOL_TRY
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  *config = CU_FUNC_CACHE_PREFER_NONE;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  GPOOL_TRY
  return config <= CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;  // a hint only
  GPOOL_CATCH
}

// Older variants whose ABI is identical to the current one.
GPOOL_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }
GPOOL_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice d) { return cuDevicePrimaryCtxReset_v2(d); }
GPOOL_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice d, unsigned int flags) { return cuDevicePrimaryCtxSetFlags_v2(d, flags); }
GPOOL_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }
GPOOL_EXPORT CUresult cuCtxPopCurrent(CUcontext* pctx) { return cuCtxPopCurrent_v2(pctx); }

GPOOL_EXPORT CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  GPOOL_TRY
  if (!ctx) return cuCtxGetDevice(device);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!State::get().isContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctxOf(ctx)->device;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

// The context named, which need not be current: its device's work (a lease's devices are workers apart).
GPOOL_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  GPOOL_TRY
  if (!ctx) return cuCtxSynchronize();
  if (!State::get().isContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  GPOOL_CONN_OF_DEVICE(conn, ctxOf(ctx)->device);
  return synchronize(conn);
  GPOOL_CATCH
}

// Created contexts: each is a context of its own to the program (current-context stack, flags, id, local
// storage), running on the lease's worker context. Destroying one ends its local storage; memory and
// other resources made while it was current stay until freed or the program ends.
namespace {
CUresult createContext(CUcontext* pctx, unsigned flags, CUdevice d) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  if (!State::get().ready(err)) return err;
  if (!State::get().device(d)) return CUDA_ERROR_INVALID_DEVICE;
  *pctx = State::get().createContext(d, flags);
  State::ctxStack().push_back(*pctx);  // a new context is made current
  return CUDA_SUCCESS;
}
}  // namespace

GPOOL_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice d) {
  GPOOL_TRY return createContext(pctx, flags, d); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n, unsigned int flags, CUdevice d) {
  GPOOL_TRY
  if (n < 0 || (n > 0 && !params)) return CUDA_ERROR_INVALID_VALUE;
  if (n > 0) GPOOL_LOG(Level::kInfo, "cuCtxCreate: execution affinity (SM count) is the lease's to set; ignored");
  return createContext(pctx, flags, d);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice d) {
  GPOOL_TRY
  if (params && params->cigParams) {
    GPOOL_LOG(Level::kWarn, "cuCtxCreate: CUDA-in-graphics contexts are not supported by gpool");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return createContext(pctx, flags, d);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  GPOOL_TRY
  if (!ctx || State::get().isPrimary(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!State::get().isContext(ctx) || ctxOf(ctx)->green) return CUDA_ERROR_INVALID_CONTEXT;  // (cuGreenCtxDestroy)
  GPOOL_CONN_OF_DEVICE(conn, reinterpret_cast<Context*>(ctx)->device);
  // As the driver does: the context's work finishes first.
  if (int st = conn->call<gpool::proto::calls::CtxSynchronize>()) return static_cast<CUresult>(st);
  if (!State::get().destroyContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  std::erase(State::ctxStack(), ctx);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice d) { return cuCtxCreate_v2(pctx, flags, d); }
GPOOL_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

// The deprecated usage count: cuCtxAttach adds a use of the current context, cuCtxDetach takes one away,
// and a created context whose last use goes (its creation counts as one) is destroyed. A primary
// context is the runtime's and stays.
namespace {
std::mutex g_uses_mu;
std::unordered_map<CUcontext, unsigned> g_uses;  // created contexts attached to: uses beyond the creation
}  // namespace
GPOOL_EXPORT CUresult cuCtxAttach(CUcontext* pctx, unsigned int flags) {
  GPOOL_TRY
  if (!pctx || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  if (!State::get().ready(err)) return err;
  CUcontext ctx = State::get().current();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (!State::get().isPrimary(ctx)) {
    std::lock_guard lock(g_uses_mu);
    ++g_uses[ctx];
  }
  *pctx = ctx;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuCtxDetach(CUcontext ctx) {
  GPOOL_TRY
  if (!ctx || !State::get().isContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (State::get().isPrimary(ctx)) return CUDA_SUCCESS;
  {
    std::lock_guard lock(g_uses_mu);
    auto it = g_uses.find(ctx);
    if (it != g_uses.end() && it->second > 0) {
      if (--it->second == 0) g_uses.erase(it);
      return CUDA_SUCCESS;
    }
  }
  return cuCtxDestroy_v2(ctx);  // its creation was its last use
  GPOOL_CATCH
}

// Peer access: a kernel on one device of the lease cannot read another's memory (two workers, two
// processes, often two hosts). Copies between them work all the same (cross_device.h).
GPOOL_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  GPOOL_TRY
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!State::get().isContext(peer)) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  GPOOL_TRY
  if (!State::get().isContext(peer)) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  GPOOL_CATCH
}

// A context's event (cuDNN): recorded after all work now in the context, or waited on by all work issued
// to it later. Every context of a device runs on its worker's one context, so the worker records or
// waits there, but for a green context's, whose own work only the event follows or waits for; the event
// must be the device's.
namespace {
template <typename Call, typename GreenCall>
CUresult contextEvent(CUcontext ctx, CUevent event) {
  // The context must be named: NVIDIA's driver refuses NULL (seen on an H200, driver 580), where other
  // calls take NULL for the current context.
  if (!event) return CUDA_ERROR_INVALID_HANDLE;
  if (!ctx || !State::get().isContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  const Context* c = ctxOf(ctx);
  GPOOL_CONN_OF_DEVICE(conn, c->device);
  const auto e = reinterpret_cast<uint64_t>(event);
  return static_cast<CUresult>(c->green ? conn->post<GreenCall>(c->green, e) : conn->post<Call>(e));
}
}  // namespace

GPOOL_EXPORT CUresult cuCtxRecordEvent(CUcontext ctx, CUevent event) {
  GPOOL_TRY return contextEvent<calls::CtxRecordEvent, calls::GreenCtxRecordEvent>(ctx, event); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuCtxWaitEvent(CUcontext ctx, CUevent event) {
  GPOOL_TRY return contextEvent<calls::CtxWaitEvent, calls::GreenCtxWaitEvent>(ctx, event); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuCtxResetPersistingL2Cache() {
  GPOOL_TRY
  GPOOL_CONN(conn);
  return static_cast<CUresult>(conn->post<gpool::proto::calls::CtxResetPersistingL2Cache>());
  GPOOL_CATCH
}

// Writes by GPUDirect RDMA into the device's memory, made visible to its work (NCCL's network proxy).
GPOOL_EXPORT CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target, CUflushGPUDirectRDMAWritesScope scope) {
  GPOOL_TRY
  GPOOL_CONN(conn);
  return static_cast<CUresult>(conn->call<gpool::proto::calls::FlushGPUDirectRDMAWrites>(static_cast<uint32_t>(target),
                                                                                        static_cast<uint32_t>(scope)));
  GPOOL_CATCH
}

// The SMs the current context may use: the device's as this lease sees it, or a green context's.
GPOOL_EXPORT CUresult cuCtxGetExecAffinity(CUexecAffinityParam* p, CUexecAffinityType type) {
  GPOOL_TRY
  if (!p || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  if (!State::get().ready(err)) return err;
  CUcontext c = State::get().current();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  p->type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  p->param.smCount.val = ctxOf(c)->green ? ctxOf(c)->green_sms  // a green context's SMs
                                          : static_cast<unsigned>(State::get().attribute(ctxOf(c)->device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
