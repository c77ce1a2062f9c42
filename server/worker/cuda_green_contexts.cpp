// The cuda backend's green contexts (sm_partitions.h).
#include "cuda_backend_class.h"

namespace gpool::worker {

// Green contexts (sm_partitions.h): the client's resources are recipes, made into the driver's again here.
// A green context's streams and events are the driver's, used with the primary context current.
Status CudaBackend::SmResourceSplit(SmSource source, SmSplit split, std::vector<uint32_t>& out) {
  std::vector<CUdevResource> parts;
  if (Status st = smParts(source, split, parts)) return st;
  for (const CUdevResource& p : parts) out.insert(out.end(), {p.sm.smCount, p.sm.minSmPartitionSize, p.sm.smCoscheduledAlignment});
  return CUDA_SUCCESS;
}

Status CudaBackend::GreenCtxCreate(SmSource source, SmSplit split, const std::vector<uint32_t>& picks, uint32_t flags, Created<GreenCtx>& out) {
  std::vector<CUdevResource> parts, chosen;
  if (Status st = smParts(source, split, parts)) return st;
  std::vector<size_t> indexes;
  if (Status st = pickParts(split.groups != 0, parts.size() - 1, picks, indexes)) return st;
  for (size_t i : indexes) chosen.push_back(parts[i]);
  CUdevResourceDesc desc = nullptr;  // (the driver has no call that frees one)
  CUresult r = d_.cuDevResourceGenerateDesc_(&desc, chosen.data(), static_cast<unsigned>(chosen.size()));
  CUgreenCtx g = nullptr;
  if (r == CUDA_SUCCESS) r = d_.cuGreenCtxCreate_(&g, desc, dev_, flags);
  if (r != CUDA_SUCCESS) return r;
  greens_.insert(g);
  out = reinterpret_cast<uint64_t>(g);
  return CUDA_SUCCESS;
}

Status CudaBackend::GreenCtxDestroy(Released<GreenCtx> g) {
  CUresult r = d_.cuGreenCtxDestroy_(reinterpret_cast<CUgreenCtx>(g.v));
  if (r == CUDA_SUCCESS) greens_.erase(reinterpret_cast<CUgreenCtx>(g.v));
  return r;
}

// The source's SMs (a green context's, or the device's all), split as `split` says: the groups made,
// then the remainder; or the source whole.
Status CudaBackend::smParts(SmSource source, SmSplit split, std::vector<CUdevResource>& parts) {
  CUdevResource whole{};
  CUresult r = source.v ? d_.cuGreenCtxGetDevResource_(reinterpret_cast<CUgreenCtx>(source.v), &whole, CU_DEV_RESOURCE_TYPE_SM)
                        : d_.cuDeviceGetDevResource_(dev_, &whole, CU_DEV_RESOURCE_TYPE_SM);
  if (r != CUDA_SUCCESS) return r;
  parts.assign(1, whole);
  if (split.groups == 0) return CUDA_SUCCESS;
  unsigned made = std::min(split.groups, std::max(whole.sm.smCount, 1u));  // (no more groups than SMs)
  parts.assign(made, CUdevResource{});
  CUdevResource remainder{};
  r = d_.cuDevSmResourceSplitByCount_(parts.data(), &made, &whole, &remainder, split.flags, split.min_count);
  if (r != CUDA_SUCCESS) return r;
  parts.resize(made);
  parts.push_back(remainder);
  return CUDA_SUCCESS;
}
}  // namespace gpool::worker
