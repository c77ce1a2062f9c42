// The sim backend's JIT linking: nothing is compiled. A link's output is its one input, or its PTX inputs
// joined (the sim loads PTX as it loads any image: for names and, where a plugin registered them, kernels).
// Where the driver would compile PTX, the sim leaves an entry in the JIT cache as the driver does.
#include <cuda.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "gpool/protocol/module_image.h"
#include "module_cache.h"
#include "sim_backend.h"

namespace gpool::worker {

// The driver keeps what it compiled of PTX in CUDA_CACHE_PATH (unless CUDA_CACHE_DISABLE=1), an entry a later
// load of the same PTX finds in place of compiling. The sim's entry is the PTX itself, named by its hash, in
// the same place: where a worker's driver would keep its cache, so that tests see which cache a worker uses
// and that its sandbox lets it write there. As the driver's, a cache that cannot be written costs nothing
// but the entry (and a warning here, which tests read).
void SimBackend::keepInJitCache(const uint8_t* ptx, size_t size) {
  const char* dir = std::getenv("CUDA_CACHE_PATH");
  const char* off = std::getenv("CUDA_CACHE_DISABLE");
  if (!dir || !*dir || (off && std::strcmp(off, "1") == 0)) return;
  std::filesystem::path entries = std::filesystem::path(dir) / "sim-ComputeCache";
  std::error_code ec;
  std::filesystem::create_directories(entries, ec);
  std::filesystem::path entry = entries / toHex(sha256(ptx, size));
  if (!ec && std::filesystem::exists(entry, ec)) return;
  std::ofstream out(entry, std::ios::binary);
  out.write(reinterpret_cast<const char*>(ptx), static_cast<std::streamsize>(size));
  if (ec || !out.good())
    spdlog::warn("sim: cannot keep a JIT cache entry in {}: {}", entries.string(), ec ? ec.message() : std::strerror(errno));
}

Status SimBackend::LinkCreate(JitOptions, Created<LinkState>& out) {
  out = newHandle(HandleKind::kLinkState);
  links_[out.v];
  return CUDA_SUCCESS;
}

Status SimBackend::LinkAddData(LinkState link, uint32_t type, Blob data, std::string name, std::vector<char>& error_log) {
  if (type >= CU_JIT_NUM_INPUT_TYPES || data.size == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t need = proto::moduleImageSize(data.data, data.size);
  if (need == 0 || need > data.size) {
    std::string why = "sim: " + name + " is not a PTX, cubin or fat binary image";
    error_log.assign(why.begin(), why.end());
    return type == CU_JIT_INPUT_PTX ? CUDA_ERROR_INVALID_PTX : CUDA_ERROR_INVALID_IMAGE;
  }
  const auto* p = static_cast<const uint8_t*>(data.data);
  if (type == CU_JIT_INPUT_PTX) keepInJitCache(p, need);
  links_[link.v].emplace_back(type, std::vector<uint8_t>(p, p + need));
  return CUDA_SUCCESS;
}

Status SimBackend::LinkComplete(LinkState link, std::vector<uint8_t>& image, std::vector<char>& info_log, std::vector<char>&) {
  const auto& inputs = links_[link.v];
  if (inputs.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [type, bytes] : inputs) {
    if (type != CU_JIT_INPUT_PTX) {
      image = bytes;  // a cubin or fat binary: the sim takes the first as the link's output
      break;
    }
    if (!image.empty() && image.back() == 0) image.pop_back();
    image.insert(image.end(), bytes.begin(), bytes.end());
  }
  if (image.back() != 0) image.push_back(0);
  std::string log = "sim: linked " + std::to_string(inputs.size()) + " input(s); nothing compiled";
  info_log.assign(log.begin(), log.end());
  return CUDA_SUCCESS;
}

Status SimBackend::LinkDestroy(Released<LinkState> link) {
  links_.erase(link.v);
  return CUDA_SUCCESS;
}

}  // namespace gpool::worker
