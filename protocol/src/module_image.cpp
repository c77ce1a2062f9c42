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

// PTX: printable text starting with a comment, directive or whitespace.
bool isPtx(const void* image) {
  const char first = *static_cast<const char*>(image);
  return first == '/' || first == '.' || first == '\n' || first == ' ' || first == '\t';
}

uint64_t moduleImageSize(const void* image, uint64_t available) {
  const auto* p = static_cast<const uint8_t*>(image);
  auto fits = [available](uint64_t off, uint64_t n) { return off <= available && n <= available - off; };
  if (!fits(0, 4)) return 0;
  uint32_t magic;
  std::memcpy(&magic, p, 4);
  if (magic == kFatbinMagic) {
    if (!fits(0, 16)) return 0;
    uint16_t header_size;
    uint64_t fat_size;
    std::memcpy(&header_size, p + 6, 2);
    std::memcpy(&fat_size, p + 8, 8);
    return fat_size > UINT64_MAX - header_size ? 0 : header_size + fat_size;
  }
  if (fits(0, sizeof(Elf64_Ehdr)) && std::memcmp(p, ELFMAG, SELFMAG) == 0 && p[EI_CLASS] == ELFCLASS64) {
    Elf64_Ehdr eh;
    std::memcpy(&eh, p, sizeof eh);
    uint64_t sh_bytes = uint64_t{eh.e_shnum} * eh.e_shentsize, ph_bytes = uint64_t{eh.e_phnum} * eh.e_phentsize;
    if (eh.e_shentsize < sizeof(Elf64_Shdr) && eh.e_shnum) return 0;
    if (!fits(eh.e_shoff, sh_bytes) || !fits(eh.e_phoff, ph_bytes)) return 0;
    uint64_t end = std::max<uint64_t>({sizeof eh, eh.e_shoff + sh_bytes, eh.e_phoff + ph_bytes});
    for (unsigned i = 0; i < eh.e_shnum; ++i) {
      Elf64_Shdr sh;
      std::memcpy(&sh, p + eh.e_shoff + uint64_t{i} * eh.e_shentsize, sizeof sh);
      if (sh.sh_type == SHT_NOBITS) continue;
      if (sh.sh_size > UINT64_MAX - sh.sh_offset) return 0;
      end = std::max<uint64_t>(end, sh.sh_offset + sh.sh_size);
    }
    return end;
  }
  if (isPtx(p)) {  // (through its NUL)
    const void* nul = std::memchr(p, 0, available == UINT64_MAX ? std::strlen(reinterpret_cast<const char*>(p)) + 1 : available);
    return nul ? static_cast<const uint8_t*>(nul) - p + 1 : 0;
  }
  return 0;
}

std::vector<uint8_t> fatbinForArch(const void* fatbin, uint64_t size, uint32_t arch) {
  const auto* p = static_cast<const uint8_t*>(fatbin);
  uint16_t header = 0;
  uint64_t body = 0;
  uint32_t magic = 0;
  if (size < 16) return {};
  std::memcpy(&magic, p, 4);
  std::memcpy(&header, p + 6, 2);
  std::memcpy(&body, p + 8, 8);
  if (magic != kFatbinMagic || header < 16 || header > size || body > size - header) return {};
  std::vector<uint8_t> out(p, p + header);
  size_t entries = 0, kept = 0;
  for (uint64_t at = header, end = header + body; end - at >= 64;) {
    uint16_t kind = 0;
    uint32_t entry_header = 0, entry_arch = 0;
    uint64_t payload = 0;
    std::memcpy(&kind, p + at, 2);
    std::memcpy(&entry_header, p + at + 4, 4);
    std::memcpy(&payload, p + at + 8, 8);
    std::memcpy(&entry_arch, p + at + 28, 4);
    if (entry_header < 64 || entry_header > end - at || payload > end - at - entry_header) return {};
    ++entries;
    if (kind == 2 /*ELF*/ && entry_arch == arch) {
      out.insert(out.end(), p + at, p + at + entry_header + payload);
      ++kept;
    }
    at += entry_header + payload;
  }
  if (kept == 0 || kept == entries) return {};
  uint64_t new_body = out.size() - header;
  std::memcpy(out.data() + 8, &new_body, 8);
  return out;
}

}  // namespace gpool::proto
