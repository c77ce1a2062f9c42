// What the sim backend reads out of a module image without a GPU: the sizes and initial contents of
// its global variables, and each kernel's parameter layout (from the cubin's .nv.info sections).
// Images come from the network: every offset and size is checked against the bytes that arrived.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpool::worker {

class CubinIndex {
 public:
  struct Global {
    uint64_t size = 0;
    std::vector<uint8_t> init;  // initial bytes; empty means zero-filled
  };

  // Indexes an ELF cubin, or the cubin for `arch` (else the newest one present) inside a fat binary.
  // PTX-only or unreadable images give an empty index: `why()` says what was missing.
  static CubinIndex build(const uint8_t* image, uint64_t size, uint32_t arch = 90);

  const Global* global(const std::string& name) const;
  // offset,size pairs in parameter order, or nullopt when the image did not describe the kernel.
  std::optional<std::vector<uint32_t>> paramLayout(const std::string& kernel) const;
  // Kernel (entry function) names, in symbol-table order.
  const std::vector<std::string>& kernels() const { return kernels_; }
  const std::string& why() const { return why_; }
  bool empty() const { return globals_.empty() && params_.empty() && kernels_.empty(); }

 private:
  void indexElf(const uint8_t* elf, uint64_t size);

  std::unordered_map<std::string, Global> globals_;
  std::unordered_map<std::string, std::vector<uint32_t>> params_;
  std::vector<std::string> kernels_;
  std::string why_;
};

}  // namespace gpool::worker
