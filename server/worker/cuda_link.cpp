// The cuda backend's JIT linking.
#include "cuda_backend_class.h"

namespace gpool::worker {

std::vector<char> CudaBackend::logOf(const std::vector<char>& buffer) {
  return std::vector<char>(buffer.begin(), std::find(buffer.begin(), buffer.end(), '\0'));
}

Status CudaBackend::LinkCreate(JitOptions o, Created<LinkState>& out) {
  auto link = std::make_unique<Link>();
  std::vector<CUjit_option>& ids = link->option_ids;
  std::vector<void*>& values = link->option_values;
  for (size_t i = 0; i < o.ids.size(); ++i) {
    ids.push_back(static_cast<CUjit_option>(o.ids[i]));
    values.push_back(reinterpret_cast<void*>(o.values[i]));  // numbers travel in the pointer slot
  }
  for (auto [id, value] : {std::pair{CU_JIT_INFO_LOG_BUFFER, static_cast<void*>(link->info.data())},
                           std::pair{CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, reinterpret_cast<void*>(link->info.size())},
                           std::pair{CU_JIT_ERROR_LOG_BUFFER, static_cast<void*>(link->error.data())},
                           std::pair{CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, reinterpret_cast<void*>(link->error.size())}}) {
    ids.push_back(id);
    values.push_back(value);
  }
  CUresult r = d_.cuLinkCreate_(static_cast<unsigned>(ids.size()), ids.data(), values.data(), &link->state);
  if (r != CUDA_SUCCESS) return r;
  out = reinterpret_cast<uint64_t>(link->state);
  links_[out.v] = std::move(link);
  return CUDA_SUCCESS;
}

Status CudaBackend::LinkAddData(LinkState l, uint32_t type, Blob data, std::string name, std::vector<char>& error_log) {
  Link& link = *links_.at(l.v);
  const auto* p = static_cast<const uint8_t*>(data.data);
  link.inputs.emplace_back(p, p + data.size);
  if (type == CU_JIT_INPUT_PTX && link.inputs.back().back() != 0) link.inputs.back().push_back(0);  // PTX ends in a NUL
  CUresult r = d_.cuLinkAddData_(link.state, static_cast<CUjitInputType>(type), link.inputs.back().data(),
                                 link.inputs.back().size(), name.c_str(), 0, nullptr, nullptr);
  if (r != CUDA_SUCCESS) error_log = logOf(link.error);
  return r;
}

Status CudaBackend::LinkComplete(LinkState l, std::vector<uint8_t>& image, std::vector<char>& info_log, std::vector<char>& error_log) {
  Link& link = *links_.at(l.v);
  void* cubin = nullptr;
  size_t size = 0;
  CUresult r = d_.cuLinkComplete_(link.state, &cubin, &size);
  if (r == CUDA_SUCCESS) image.assign(static_cast<uint8_t*>(cubin), static_cast<uint8_t*>(cubin) + size);
  info_log = logOf(link.info);
  error_log = logOf(link.error);
  return r;
}

Status CudaBackend::LinkDestroy(Released<LinkState> l) {
  auto it = links_.find(l.v);
  CUresult r = d_.cuLinkDestroy_(it->second->state);
  links_.erase(it);
  return r;
}
}  // namespace gpool::worker
