// Fat binary entries (possibly ZSTD- or LZ4-compressed) → one ELF cubin → symbols and .nv.info records.
#include "cubin_index.h"

#include <elf.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "gpool/protocol/module_image.h"

namespace gpool::worker {
namespace {

template <class T>
bool readAt(const uint8_t* base, uint64_t size, uint64_t off, T& out) {
  if (off > size || size - off < sizeof(T)) return false;
  std::memcpy(&out, base + off, sizeof(T));
  return true;
}

// Fat binary entry header fields used here (offsets within the entry; see docs/protocol.md).
constexpr uint16_t kEntryElf = 2;
constexpr uint64_t kEntryLz4 = 0x2000;
constexpr uint64_t kEntryZstd = 0x8000;
constexpr uint64_t kMaxCubin = 1ull << 30;  // refuse to inflate anything larger
// Nor more than this many times the compressed bytes: LZ4 cannot expand further, and no real cubin
// compresses better with ZSTD. A few kilobytes that claim a gigabyte would otherwise cost a gigabyte.
constexpr uint64_t kMaxInflation = 255;

// .nv.info record formats and the attribute that describes one kernel parameter.
constexpr uint8_t kFmtNval = 1, kFmtBval = 2, kFmtHval = 3, kFmtSval = 4;
constexpr uint8_t kAttrKparamInfo = 0x17;

}  // namespace

CubinIndex CubinIndex::build(const uint8_t* image, uint64_t size, uint32_t arch) {
  CubinIndex index;
  uint32_t magic = 0;
  if (!readAt(image, size, 0, magic)) {
    index.why_ = "image too short";
    return index;
  }
  if (magic == 0x464c457f) {  // "\x7fELF"
    index.indexElf(image, size);
    return index;
  }
  if (magic != proto::kFatbinMagic) {
    index.why_ = "not a cubin or fat binary (PTX is compiled only by a real driver)";
    return index;
  }
  uint16_t header = 0;
  uint64_t body = 0;
  if (!readAt(image, size, 6, header) || !readAt(image, size, 8, body) || header < 16 || body > size - header) {
    index.why_ = "truncated fat binary header";
    return index;
  }
  // Choose the cubin built for `arch`, else the newest one.
  const uint8_t* best = nullptr;
  uint64_t best_size = 0, best_raw = 0, best_flags = 0;
  uint32_t best_arch = 0;
  uint64_t p = header, end = header + body;
  while (end - p >= 64) {
    uint16_t kind = 0;
    uint32_t hs = 0, stored = 0, entry_arch = 0;
    uint64_t payload = 0, flags = 0, raw = 0;
    readAt(image, size, p, kind);
    readAt(image, size, p + 4, hs);
    readAt(image, size, p + 8, payload);
    readAt(image, size, p + 16, stored);
    readAt(image, size, p + 28, entry_arch);
    readAt(image, size, p + 40, flags);
    readAt(image, size, p + 56, raw);
    if (hs < 64 || hs > end - p || payload > end - p - hs) break;
    if (kind == kEntryElf) {
      bool better = !best || (entry_arch == arch) ||
                    (best_arch != arch && entry_arch > best_arch);
      if (better) {
        best = image + p + hs;
        best_size = (flags & (kEntryLz4 | kEntryZstd)) && stored ? std::min<uint64_t>(stored, payload) : payload;
        best_raw = raw;
        best_flags = flags;
        best_arch = entry_arch;
      }
    }
    p += hs + payload;
  }
  if (!best) {
    index.why_ = "the fat binary holds no cubin (PTX is compiled only by a real driver)";
    return index;
  }
  if (!(best_flags & (kEntryLz4 | kEntryZstd))) {
    index.indexElf(best, best_size);
    return index;
  }
  if (best_raw == 0 || best_raw > kMaxCubin || best_raw > best_size * kMaxInflation + 64) {
    index.why_ = "compressed cubin with an implausible size";
    return index;
  }
  std::vector<uint8_t> elf(best_raw);
  if (best_flags & kEntryZstd) {
    size_t n = ZSTD_decompress(elf.data(), elf.size(), best, best_size);
    if (ZSTD_isError(n)) {
      index.why_ = std::string("zstd: ") + ZSTD_getErrorName(n);
      return index;
    }
    elf.resize(n);
  } else {
    int n = LZ4_decompress_safe(reinterpret_cast<const char*>(best), reinterpret_cast<char*>(elf.data()),
                                static_cast<int>(std::min<uint64_t>(best_size, INT32_MAX)),
                                static_cast<int>(elf.size()));
    if (n < 0) {
      index.why_ = "lz4: corrupt cubin";
      return index;
    }
    elf.resize(static_cast<size_t>(n));
  }
  index.indexElf(elf.data(), elf.size());
  return index;
}

void CubinIndex::indexElf(const uint8_t* elf, uint64_t size) {
  Elf64_Ehdr eh;
  if (!readAt(elf, size, 0, eh) || eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      eh.e_shentsize < sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum) {
    why_ = "not a 64-bit little-endian ELF";
    return;
  }
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (unsigned i = 0; i < eh.e_shnum; ++i) {
    if (eh.e_shoff > size || !readAt(elf, size, eh.e_shoff + uint64_t{i} * eh.e_shentsize, sections[i])) {
      why_ = "section headers out of range";
      return;
    }
  }
  auto inImage = [&](const Elf64_Shdr& s) {
    return s.sh_type == SHT_NOBITS || (s.sh_offset <= size && s.sh_size <= size - s.sh_offset);
  };
  // A NUL-terminated string inside section `s` at `off`, or "" when it runs off the end.
  auto stringAt = [&](const Elf64_Shdr& s, uint64_t off) -> std::string {
    if (!inImage(s) || s.sh_type == SHT_NOBITS || off >= s.sh_size) return {};
    const char* begin = reinterpret_cast<const char*>(elf + s.sh_offset + off);
    const void* nul = std::memchr(begin, 0, s.sh_size - off);
    return nul ? std::string(begin, static_cast<const char*>(nul)) : std::string{};
  };
  const Elf64_Shdr& shstr = sections[eh.e_shstrndx];

  for (const Elf64_Shdr& s : sections) {
    if (!inImage(s)) continue;
    if (s.sh_type == SHT_SYMTAB && s.sh_link < sections.size() && s.sh_entsize >= sizeof(Elf64_Sym)) {
      const Elf64_Shdr& strtab = sections[s.sh_link];
      for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= s.sh_size; off += s.sh_entsize) {
        Elf64_Sym sym;
        readAt(elf, size, s.sh_offset + off, sym);
        constexpr uint8_t kCudaEntry = 0x10;  // st_other flag of a kernel (an entry function)
        if (ELF64_ST_TYPE(sym.st_info) == STT_FUNC && (sym.st_other & kCudaEntry)) {
          std::string kernel = stringAt(strtab, sym.st_name);
          if (!kernel.empty()) kernels_.push_back(std::move(kernel));
          continue;
        }
        if (ELF64_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_shndx == SHN_UNDEF || sym.st_shndx >= sections.size())
          continue;
        std::string name = stringAt(strtab, sym.st_name);
        if (name.empty() || sym.st_size > kMaxCubin) continue;
        Global g;
        g.size = sym.st_size;
        const Elf64_Shdr& home = sections[sym.st_shndx];
        if (home.sh_type != SHT_NOBITS && inImage(home) && sym.st_value <= home.sh_size &&
            sym.st_size <= home.sh_size - sym.st_value) {
          const uint8_t* from = elf + home.sh_offset + sym.st_value;
          g.init.assign(from, from + sym.st_size);
        }
        globals_[name] = std::move(g);
      }
    }
    std::string name = stringAt(shstr, s.sh_name);
    static constexpr std::string_view kInfo = ".nv.info.";
    if (name.size() > kInfo.size() && name.compare(0, kInfo.size(), kInfo) == 0 && s.sh_type != SHT_NOBITS) {
      std::map<uint32_t, std::pair<uint32_t, uint32_t>> by_ordinal;  // ordinal → offset, size
      const uint8_t* rec = elf + s.sh_offset;
      uint64_t off = 0;
      bool ok = true;
      while (ok && s.sh_size - off >= 4) {
        uint8_t fmt = rec[off], attr = rec[off + 1];
        uint16_t len = 0;
        std::memcpy(&len, rec + off + 2, 2);
        if (fmt == kFmtSval) {
          if (s.sh_size - off - 4 < len) { ok = false; break; }
          if (attr == kAttrKparamInfo && len >= 12) {
            uint16_t ordinal = 0, poff = 0;
            uint32_t tail = 0;
            std::memcpy(&ordinal, rec + off + 8, 2);
            std::memcpy(&poff, rec + off + 10, 2);
            std::memcpy(&tail, rec + off + 12, 4);
            by_ordinal[ordinal] = {poff, (tail >> 18) & 0x3fff};
          }
          off += 4 + len;
        } else if (fmt == kFmtNval || fmt == kFmtBval || fmt == kFmtHval) {
          off += 4;
        } else {
          ok = false;
        }
      }
      std::vector<uint32_t> layout;
      uint32_t expect = 0;
      for (const auto& [ordinal, os] : by_ordinal) {
        if (ordinal != expect++) { ok = false; break; }
        layout.push_back(os.first);
        layout.push_back(os.second);
      }
      if (ok) params_[name.substr(kInfo.size())] = std::move(layout);
    }
  }
}

const CubinIndex::Global* CubinIndex::global(const std::string& name) const {
  auto it = globals_.find(name);
  return it == globals_.end() ? nullptr : &it->second;
}

std::optional<std::vector<uint32_t>> CubinIndex::paramLayout(const std::string& kernel) const {
  auto it = params_.find(kernel);
  if (it == params_.end()) return std::nullopt;
  return it->second;
}

}  // namespace gpool::worker
