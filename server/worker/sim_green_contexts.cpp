// The sim backend's green contexts: SM partitions made by the rules NVIDIA documents for compute
// capability 9.0 (the modelled device's), and counted only: the host runs every kernel. A split makes groups
// of at least 8 SMs in steps of 8 (2 in steps of 2 where it ignores co-scheduling), as many as the request
// allows and the SMs hold; what is left is the remainder. A green context's streams are streams like any
// other here, and its events are the context's (work runs in issue order).
#include <cuda.h>

#include <algorithm>

#include "sim_backend.h"
#include "sm_partitions.h"

namespace gpool::worker {

Status SimBackend::smParts(SmSource source, SmSplit split, std::vector<SmPart>& parts) const {
  const uint32_t total = source.v ? green_contexts_.at(source.v) : kMultiprocessors;
  parts.clear();
  if (split.groups == 0) {
    parts.push_back({total, 8, 8});
    return CUDA_SUCCESS;
  }
  constexpr uint32_t kKnownFlags = CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING | CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE;
  if ((split.flags & ~kKnownFlags) || split.min_count > total) return CUDA_ERROR_INVALID_VALUE;
  const uint32_t step = (split.flags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) ? 2 : 8;
  const uint32_t size = (std::max(split.min_count, step) + step - 1) / step * step;
  const uint32_t made = std::min(split.groups, total / size);
  parts.assign(made, SmPart{size, step, step});
  parts.push_back({total - made * size, step, step});
  return CUDA_SUCCESS;
}

Status SimBackend::SmResourceSplit(SmSource source, SmSplit split, std::vector<uint32_t>& out) {
  std::vector<SmPart> parts;
  if (Status st = smParts(source, split, parts)) return st;
  for (const SmPart& p : parts) out.insert(out.end(), {p.sms, p.min, p.align});
  return CUDA_SUCCESS;
}

Status SimBackend::GreenCtxCreate(SmSource source, SmSplit split, std::vector<uint32_t> picks, uint32_t flags, Created<GreenCtx>& out) {
  if (flags > CU_GREEN_CTX_DEFAULT_STREAM) return CUDA_ERROR_INVALID_VALUE;  // (0 too: CUDA 13.1 made the flag optional)
  std::vector<SmPart> parts;
  if (Status st = smParts(source, split, parts)) return st;
  std::vector<size_t> chosen;
  if (Status st = pickParts(split.groups != 0, parts.size() - 1, picks, chosen)) return st;
  uint32_t sms = 0;
  for (size_t i : chosen) sms += parts[i].sms;
  if (sms == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;  // an empty remainder
  out = newHandle(HandleKind::kGreenCtx);
  green_contexts_[out.v] = sms;
  return CUDA_SUCCESS;
}

Status SimBackend::GreenCtxDestroy(Released<GreenCtx> g) {
  green_contexts_.erase(g.v);
  return CUDA_SUCCESS;
}

Status SimBackend::GreenCtxStreamCreate(GreenCtx, uint32_t flags, int32_t priority, Created<Stream>& stream) {
  if (!(flags & CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;  // the driver requires it
  return StreamCreate(flags, priority, stream);
}

Status SimBackend::GreenCtxRecordEvent(GreenCtx, Event e) { return CtxRecordEvent(e); }
Status SimBackend::GreenCtxWaitEvent(GreenCtx, Event e) { return CtxWaitEvent(e); }

}  // namespace gpool::worker
