// Module images from the network (protocol/src/module_image.cpp, server/worker/cubin_index.cpp): the
// size of a fat binary wrapper, fat binary, ELF cubin or PTX text; trimming a fat binary to one
// architecture; and the sim backend's index of globals and kernel parameters. Every offset is checked
// against the bytes that arrived.
#include <cstdint>
#include <cstring>
#include <vector>

#include "cubin_index.h"
#include "gpool/protocol/module_image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpool;
  std::vector<uint8_t> image(data, data + size);  // its own allocation: reads past it are caught
  // Sizing reads only what arrived (AddressSanitizer checks); a size past it means "incomplete", refused
  // by the workers as here.
  uint64_t n = proto::moduleImageSize(image.data(), image.size());
  if (n == 0 || n > image.size()) return 0;
  uint32_t magic = 0;
  std::memcpy(&magic, image.data(), 4);
  if (magic == proto::kFatbinMagic) proto::fatbinForArch(image.data(), n, 90);
  auto index = worker::CubinIndex::build(image.data(), image.size(), 90);
  for (const auto& k : index.kernels()) index.paramLayout(k);
  return 0;
}
