// Streams and events. Creation and waits need replies; destruction, records and stream waits are
// fire-and-forget. Stream flags and priorities are remembered locally.
#include <cstring>
#include <tuple>
#include <vector>

#include "cross_device.h"
#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {
uint64_t raw(void* h) { return reinterpret_cast<uint64_t>(h); }

CUresult streamCreate(CUstream* s, unsigned flags, int priority) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r; greenStreamCreate(s, flags, priority, r)) return r;
  GPOOL_CONN(conn);
  calls::StreamCreate::out::tuple r;
  int st = conn->call<calls::StreamCreate>(r, uint32_t{flags}, int32_t{priority});
  if (st) return static_cast<CUresult>(st);
  *s = reinterpret_cast<CUstream>(std::get<0>(r).v);
  State::get().addStream(std::get<0>(r), {flags, priority});
  return CUDA_SUCCESS;
}

CUresult waitCall(uint64_t s, bool query) {
  GPOOL_CONN_OF_HANDLE(conn, s);
  return query ? static_cast<CUresult>(conn->call<calls::StreamQuery>(s)) : synchronizeOn(conn, s);
}

}  // namespace

CUresult gpool::client::synchronizeOn(Connection* conn, uint64_t stream) {
  if (int st = conn->call<calls::StreamSynchronize>(stream)) return static_cast<CUresult>(st);
  return managedAtSync();  // managed memory is the host's again
}

namespace {
CUresult streamWait(uint64_t s, CUevent e, unsigned flags) {
  if (CUresult r; waitAcrossDevices(s, raw(e), r)) return r;
  GPOOL_CONN_OF_HANDLE(conn, s);
  return static_cast<CUresult>(conn->post<calls::StreamWaitEvent>(s, raw(e), uint32_t{flags}));
}

CUresult record(CUevent e, uint64_t s, unsigned flags) {
  GPOOL_CONN_OF_HANDLE(conn, raw(e));
  return static_cast<CUresult>(conn->post<calls::EventRecord>(raw(e), s, uint32_t{flags}));
}

CUresult streamFlags(uint64_t s, unsigned* flags, int* priority) {
  State::StreamInfo info{0, 0};
  if (s > 2 && !State::get().streamInfo(s, info)) return CUDA_ERROR_INVALID_HANDLE;
  if (flags) *flags = info.flags;
  if (priority) *priority = info.priority;
  return CUDA_SUCCESS;
}
// A stream's attributes are launch attributes, checked by the worker as a launch's are.
CUresult setAttribute(uint64_t s, CUstreamAttrID id, const CUstreamAttrValue* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, s);
  CUlaunchAttribute a{};
  a.id = id;
  a.value = *value;
  return static_cast<CUresult>(conn->call<calls::StreamSetAttribute>(s, gpool::proto::LaunchAttrs{gpool::proto::Blob{&a, sizeof a}}));
}

CUresult getAttribute(uint64_t s, CUstreamAttrID id, CUstreamAttrValue* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, s);
  std::tuple<std::vector<uint8_t>> out;
  if (int st = conn->call<calls::StreamGetAttribute>(out, s, static_cast<uint32_t>(id))) return static_cast<CUresult>(st);
  if (std::get<0>(out).size() != sizeof *value) return CUDA_ERROR_UNKNOWN;
  std::memcpy(value, std::get<0>(out).data(), sizeof *value);
  return CUDA_SUCCESS;
}

CUresult copyAttributes(uint64_t dst, uint64_t src) {
  GPOOL_CONN_OF_HANDLE(conn, dst);
  return static_cast<CUresult>(conn->call<calls::StreamCopyAttributes>(dst, src));
}
}  // namespace

GPOOL_EXPORT CUresult cuStreamSetAttribute(CUstream s, CUstreamAttrID id, const CUstreamAttrValue* v) {
  GPOOL_TRY return setAttribute(streamArg(s, false), id, v); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamSetAttribute_ptsz(CUstream s, CUstreamAttrID id, const CUstreamAttrValue* v) {
  GPOOL_TRY return setAttribute(streamArg(s, true), id, v); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetAttribute(CUstream s, CUstreamAttrID id, CUstreamAttrValue* v) {
  GPOOL_TRY return getAttribute(streamArg(s, false), id, v); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetAttribute_ptsz(CUstream s, CUstreamAttrID id, CUstreamAttrValue* v) {
  GPOOL_TRY return getAttribute(streamArg(s, true), id, v); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) {
  GPOOL_TRY return copyAttributes(streamArg(dst, false), streamArg(src, false)); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) {
  GPOOL_TRY return copyAttributes(streamArg(dst, true), streamArg(src, true)); GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuStreamCreate(CUstream* s, unsigned int flags) {
  GPOOL_TRY return streamCreate(s, flags, 0); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamCreateWithPriority(CUstream* s, unsigned int flags, int priority) {
  GPOOL_TRY return streamCreate(s, flags, priority); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, raw(s));
  State::get().removeStream(raw(s));
  return static_cast<CUresult>(conn->post<calls::StreamDestroy>(raw(s)));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamSynchronize(CUstream s) { GPOOL_TRY return waitCall(streamArg(s, false), false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { GPOOL_TRY return waitCall(streamArg(s, true), false); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuStreamQuery(CUstream s) { GPOOL_TRY return waitCall(streamArg(s, false), true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuStreamQuery_ptsz(CUstream s) { GPOOL_TRY return waitCall(streamArg(s, true), true); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  GPOOL_TRY return streamWait(streamArg(s, false), e, flags); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) {
  GPOOL_TRY return streamWait(streamArg(s, true), e, flags); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetFlags(CUstream s, unsigned int* flags) {
  GPOOL_TRY if (!flags) return CUDA_ERROR_INVALID_VALUE; return streamFlags(raw(s), flags, nullptr); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream s, unsigned int* flags) { return cuStreamGetFlags(s, flags); }
GPOOL_EXPORT CUresult cuStreamGetPriority(CUstream s, int* priority) {
  GPOOL_TRY if (!priority) return CUDA_ERROR_INVALID_VALUE; return streamFlags(raw(s), nullptr, priority); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetPriority_ptsz(CUstream s, int* priority) { return cuStreamGetPriority(s, priority); }
GPOOL_EXPORT CUresult cuStreamGetCtx(CUstream s, CUcontext* ctx) {
  GPOOL_TRY
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  if (!State::get().readyForHandle(raw(s), err)) return err;
  // A default stream is the current context's (a green one too); a green context's stream, that context;
  // any other, its device's primary context (every context of a device runs on its worker's one).
  CUcontext current = State::get().current(), green = nullptr;
  if (raw(s) <= reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD) && current) *ctx = current;
  else if (greenOfStream(raw(s), green) && green) *ctx = green;
  else *ctx = reinterpret_cast<CUcontext>(State::get().primary(State::get().deviceOfHandle(raw(s))));
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext* ctx) { return cuStreamGetCtx(s, ctx); }
GPOOL_EXPORT CUresult cuStreamGetId(CUstream s, unsigned long long* id) {
  GPOOL_TRY if (!id) return CUDA_ERROR_INVALID_VALUE; *id = streamArg(s, false); return CUDA_SUCCESS; GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetId_ptsz(CUstream s, unsigned long long* id) {
  GPOOL_TRY if (!id) return CUDA_ERROR_INVALID_VALUE; *id = streamArg(s, true); return CUDA_SUCCESS; GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuEventCreate(CUevent* e, unsigned int flags) {
  GPOOL_TRY
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  calls::EventCreate::out::tuple r;
  int st = conn->call<calls::EventCreate>(r, uint32_t{flags});
  *e = reinterpret_cast<CUevent>(std::get<0>(r).v);
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, raw(e));
  return static_cast<CUresult>(conn->post<calls::EventDestroy>(raw(e)));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { GPOOL_TRY return record(e, streamArg(s, false), 0); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { GPOOL_TRY return record(e, streamArg(s, true), 0); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags) {
  GPOOL_TRY return record(e, streamArg(s, false), flags); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags) {
  GPOOL_TRY return record(e, streamArg(s, true), flags); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuEventSynchronize(CUevent e) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, raw(e));
  int st = conn->call<calls::EventSynchronize>(raw(e));
  return st == CUDA_SUCCESS ? managedAtSync() : static_cast<CUresult>(st);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuEventQuery(CUevent e) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, raw(e));
  return static_cast<CUresult>(conn->call<calls::EventQuery>(raw(e)));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  GPOOL_TRY
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(start));
  std::tuple<float> r;
  int st = conn->call<calls::EventElapsedTime>(r, raw(start), raw(end));
  *ms = std::get<0>(r);
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) { return cuEventElapsedTime_v2(ms, start, end); }

// Older variants whose ABI is identical to the current one.
GPOOL_EXPORT CUresult cuStreamDestroy(CUstream s) { return cuStreamDestroy_v2(s); }
GPOOL_EXPORT CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }
// A green context's stream: the green context, and the device's primary context as the driver gives it.
GPOOL_EXPORT CUresult cuStreamGetCtx_v2(CUstream s, CUcontext* ctx, CUgreenCtx* green) {
  GPOOL_TRY
  if (!ctx || !green) return CUDA_ERROR_INVALID_VALUE;
  CUcontext g = nullptr;
  if (!greenOfStream(raw(s), g) || !g) {
    *green = nullptr;
    return cuStreamGetCtx(s, ctx);
  }
  if (raw(s) == reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD)) return CUDA_ERROR_INVALID_HANDLE;  // as the driver
  *green = reinterpret_cast<CUgreenCtx>(g);
  *ctx = reinterpret_cast<CUcontext>(State::get().primary(reinterpret_cast<const Context*>(g)->device));
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext* ctx, CUgreenCtx* green) { return cuStreamGetCtx_v2(s, ctx, green); }
GPOOL_EXPORT CUresult cuStreamGetDevice(CUstream s, CUdevice* device) {
  GPOOL_TRY
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  if (!State::get().readyForHandle(raw(s), err)) return err;
  *device = State::get().deviceOfHandle(raw(s));
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamGetDevice_ptsz(CUstream s, CUdevice* device) { return cuStreamGetDevice(s, device); }
