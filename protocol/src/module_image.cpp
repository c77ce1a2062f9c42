// Module image sizing (see module_image.h and CUDA-PRIVATE-INTERFACES.md §5).
#include "gpool/protocol/module_image.h"

#include <elf.h>

#include <algorithm>
#include <cstring>

namespace gpool::proto {

const void* fatbinFromWrapper(const void* wrapper) {
  struct Wrapper {
    uint32_t magic;
    uint32_t version;
    const void* data;
    void* filename_or_fatbins;
  };
  Wrapper w;
  std::memcpy(&w, wrapper, sizeof w);
  if (w.magic != kFatbincMagic || (w.version != 1 && w.version != 2)) return nullptr;
  return w.data;
}

uint64_t moduleImageSize(const void* image) {
  const auto* p = static_cast<const uint8_t*>(image);
  uint32_t magic;
  std::memcpy(&magic, p, 4);
  if (magic == kFatbinMagic) {
    uint16_t header_size;
    uint64_t fat_size;
    std::memcpy(&header_size, p + 6, 2);
    std::memcpy(&fat_size, p + 8, 8);
    return header_size + fat_size;
  }
  if (std::memcmp(p, ELFMAG, SELFMAG) == 0 && p[EI_CLASS] == ELFCLASS64) {
    Elf64_Ehdr eh;
    std::memcpy(&eh, p, sizeof eh);
    uint64_t end = std::max<uint64_t>(sizeof eh, eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize);
    end = std::max<uint64_t>(end, eh.e_phoff + uint64_t{eh.e_phnum} * eh.e_phentsize);
    for (unsigned i = 0; i < eh.e_shnum; ++i) {
      Elf64_Shdr sh;
      std::memcpy(&sh, p + eh.e_shoff + uint64_t{i} * eh.e_shentsize, sizeof sh);
      if (sh.sh_type != SHT_NOBITS) end = std::max<uint64_t>(end, sh.sh_offset + sh.sh_size);
    }
    return end;
  }
  // PTX: printable text starting with a comment or directive.
  if (p[0] == '/' || p[0] == '.' || p[0] == '\n' || p[0] == ' ' || p[0] == '\t')
    return std::strlen(reinterpret_cast<const char*>(p)) + 1;
  return 0;
}

}  // namespace gpool::proto
