// Fat binary entries (possibly ZSTD- or LZ4-compressed) → one ELF cubin → symbols and .nv.info records.
#include "cubin_index.h"

#include <elf.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>

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

// The fat binary's cubin for one architecture: where its bytes are, how many are stored, and how many
// it has once inflated (`flags`: kEntryLz4 or kEntryZstd when compressed).
struct FatbinEntry {
  const uint8_t* bytes = nullptr;
  uint64_t size = 0, raw = 0, flags = 0;
  uint32_t arch = 0;
  bool compressed() const { return (flags & (kEntryLz4 | kEntryZstd)) != 0; }
};

// The cubin built for `arch`, else the newest one; nullopt with `why` when there is none.
std::optional<FatbinEntry> pickCubin(const uint8_t* image, uint64_t size, uint32_t arch, std::string& why) {
  uint16_t header = 0;
  uint64_t body = 0;
  if (!readAt(image, size, 6, header) || !readAt(image, size, 8, body) || header < 16 || body > size - header) {
    why = "truncated fat binary header";
    return std::nullopt;
  }
  std::optional<FatbinEntry> best;
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
    if (kind == kEntryElf && (!best || entry_arch == arch || (best->arch != arch && entry_arch > best->arch))) {
      best = FatbinEntry{image + p + hs, payload, raw, flags, entry_arch};
      if (best->compressed() && stored) best->size = std::min<uint64_t>(stored, payload);
    }
    p += hs + payload;
  }
  if (!best) why = "the fat binary holds no cubin (PTX is compiled only by a real driver)";
  return best;
}

// A compressed cubin, inflated; false with `why` when it is implausible or corrupt.
bool inflate(const FatbinEntry& e, std::vector<uint8_t>& elf, std::string& why) {
  if (e.raw == 0 || e.raw > kMaxCubin || e.raw > e.size * kMaxInflation + 64) {
    why = "compressed cubin with an implausible size";
    return false;
  }
  elf.resize(e.raw);
  if (e.flags & kEntryZstd) {
    size_t n = ZSTD_decompress(elf.data(), elf.size(), e.bytes, e.size);
    if (ZSTD_isError(n)) {
      why = std::string("zstd: ") + ZSTD_getErrorName(n);
      return false;
    }
    elf.resize(n);
    return true;
  }
  int n = LZ4_decompress_safe(reinterpret_cast<const char*>(e.bytes), reinterpret_cast<char*>(elf.data()),
                              static_cast<int>(std::min<uint64_t>(e.size, INT32_MAX)), static_cast<int>(elf.size()));
  if (n < 0) {
    why = "lz4: corrupt cubin";
    return false;
  }
  elf.resize(static_cast<size_t>(n));
  return true;
}

// One ELF image and its section headers, every offset checked against the image's size.
struct ElfView {
  const uint8_t* elf;
  uint64_t size;
  std::vector<Elf64_Shdr> sections;

  bool inImage(const Elf64_Shdr& s) const {
    return s.sh_type == SHT_NOBITS || (s.sh_offset <= size && s.sh_size <= size - s.sh_offset);
  }
  // A NUL-terminated string inside section `s` at `off`, or "" when it runs off the end.
  std::string stringAt(const Elf64_Shdr& s, uint64_t off) const {
    if (!inImage(s) || s.sh_type == SHT_NOBITS || off >= s.sh_size) return {};
    const char* begin = reinterpret_cast<const char*>(elf + s.sh_offset + off);
    const void* nul = std::memchr(begin, 0, s.sh_size - off);
    return nul ? std::string(begin, static_cast<const char*>(nul)) : std::string{};
  }
};

// One .nv.info.KERNEL section's parameter layout: offset and size of each parameter in ordinal order;
// nullopt when a record runs off the section or an ordinal is missing.
std::optional<std::vector<uint32_t>> nvInfoParams(const uint8_t* rec, uint64_t size) {
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> by_ordinal;  // ordinal → offset, size
  uint64_t off = 0;
  while (size - off >= 4) {
    uint8_t fmt = rec[off], attr = rec[off + 1];
    uint16_t len = 0;
    std::memcpy(&len, rec + off + 2, 2);
    if (fmt == kFmtNval || fmt == kFmtBval || fmt == kFmtHval) {
      off += 4;
      continue;
    }
    if (fmt != kFmtSval || size - off - 4 < len) return std::nullopt;
    if (attr == kAttrKparamInfo && len >= 12) {
      uint16_t ordinal = 0, poff = 0;
      uint32_t tail = 0;
      std::memcpy(&ordinal, rec + off + 8, 2);
      std::memcpy(&poff, rec + off + 10, 2);
      std::memcpy(&tail, rec + off + 12, 4);
      by_ordinal[ordinal] = {poff, (tail >> 18) & 0x3fff};
    }
    off += 4 + len;
  }
  std::vector<uint32_t> layout;
  uint32_t expect = 0;
  for (const auto& [ordinal, os] : by_ordinal) {
    if (ordinal != expect++) return std::nullopt;
    layout.push_back(os.first);
    layout.push_back(os.second);
  }
  return layout;
}

// A symbol table's kernels (entry functions) and globals, with the initial bytes of those that have them.
void readSymbols(const ElfView& view, const Elf64_Shdr& symtab, std::vector<std::string>& kernels,
                 std::unordered_map<std::string, CubinIndex::Global>& globals) {
  const Elf64_Shdr& strtab = view.sections[symtab.sh_link];
  for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= symtab.sh_size; off += symtab.sh_entsize) {
    Elf64_Sym sym;
    readAt(view.elf, view.size, symtab.sh_offset + off, sym);
    constexpr uint8_t kCudaEntry = 0x10;  // st_other flag of a kernel (an entry function)
    if (ELF64_ST_TYPE(sym.st_info) == STT_FUNC && (sym.st_other & kCudaEntry)) {
      std::string kernel = view.stringAt(strtab, sym.st_name);
      if (!kernel.empty()) kernels.push_back(std::move(kernel));
      continue;
    }
    if (ELF64_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_shndx == SHN_UNDEF || sym.st_shndx >= view.sections.size()) continue;
    std::string name = view.stringAt(strtab, sym.st_name);
    if (name.empty() || sym.st_size > kMaxCubin) continue;
    CubinIndex::Global g;
    g.size = sym.st_size;
    const Elf64_Shdr& home = view.sections[sym.st_shndx];
    if (home.sh_type != SHT_NOBITS && view.inImage(home) && sym.st_value <= home.sh_size && sym.st_size <= home.sh_size - sym.st_value) {
      const uint8_t* from = view.elf + home.sh_offset + sym.st_value;
      g.init.assign(from, from + sym.st_size);
    }
    globals[name] = std::move(g);
  }
}

}  // namespace

CubinIndex CubinIndex::build(const uint8_t* image, uint64_t size, uint32_t arch) {
  CubinIndex index;
  uint32_t magic = 0;
  if (!readAt(image, size, 0, magic)) {
    index.why_ = "image too short";
  } else if (magic == 0x464c457f) {  // "\x7fELF"
    index.indexElf(image, size);
  } else if (magic != proto::kFatbinMagic) {
    index.why_ = "not a cubin or fat binary (PTX is compiled only by a real driver)";
  } else if (auto entry = pickCubin(image, size, arch, index.why_); entry && !entry->compressed()) {
    index.indexElf(entry->bytes, entry->size);
  } else if (std::vector<uint8_t> elf; entry && inflate(*entry, elf, index.why_)) {
    index.indexElf(elf.data(), elf.size());
  }
  return index;
}

void CubinIndex::indexElf(const uint8_t* elf, uint64_t size) {
  Elf64_Ehdr eh;
  if (!readAt(elf, size, 0, eh) || eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      eh.e_shentsize < sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum) {
    why_ = "not a 64-bit little-endian ELF";
    return;
  }
  ElfView view{elf, size, std::vector<Elf64_Shdr>(eh.e_shnum)};
  for (unsigned i = 0; i < eh.e_shnum; ++i) {
    if (eh.e_shoff > size || !readAt(elf, size, eh.e_shoff + uint64_t{i} * eh.e_shentsize, view.sections[i])) {
      why_ = "section headers out of range";
      return;
    }
  }
  const Elf64_Shdr& shstr = view.sections[eh.e_shstrndx];
  static constexpr std::string_view kInfo = ".nv.info.";
  for (const Elf64_Shdr& s : view.sections) {
    if (!view.inImage(s)) continue;
    if (s.sh_type == SHT_SYMTAB && s.sh_link < view.sections.size() && s.sh_entsize >= sizeof(Elf64_Sym)) readSymbols(view, s, kernels_, globals_);
    std::string name = view.stringAt(shstr, s.sh_name);
    if (name.size() > kInfo.size() && name.compare(0, kInfo.size(), kInfo) == 0 && s.sh_type != SHT_NOBITS)
      if (auto layout = nvInfoParams(elf + s.sh_offset, s.sh_size)) params_[name.substr(kInfo.size())] = std::move(*layout);
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
