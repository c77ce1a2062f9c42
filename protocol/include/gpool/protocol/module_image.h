// Recognises module images (fat binary wrapper, fat binary, ELF cubin, PTX text) and their sizes:
// the driver API passes images by pointer alone, so the client must find out how much to send.
#pragma once

#include <cstdint>
#include <vector>

namespace gpool::proto {

inline constexpr uint32_t kFatbincMagic = 0x466243b1;  // fatbinc wrapper {magic, version, data, ...}
inline constexpr uint32_t kFatbinMagic = 0xba55ed50;   // fat binary header

// Size in bytes of the image at `image` (fat binary header + entries, ELF through its last section
// or program header, PTX through its NUL). 0 when the bytes are not a known image kind, or when reading
// its headers would go past `available` bytes (pass the received size for untrusted images).
uint64_t moduleImageSize(const void* image, uint64_t available = UINT64_MAX);
// Whether an image of at least one byte is PTX text (what the driver compiles), as moduleImageSize tells it.
bool isPtx(const void* image);
// A fatbinc wrapper's fat binary, or nullptr when `wrapper` is not one.
const void* fatbinFromWrapper(const void* wrapper);

// A copy of the fat binary of `size` bytes that keeps only the cubins built for `arch` (major*10+minor),
// which is all a device of that architecture loads; empty when there is no such cubin or nothing to
// drop (then the whole image is sent: it may hold PTX to JIT, and the driver accepts images without
// code for the device, lazily, which cuBLASLt relies on).
std::vector<uint8_t> fatbinForArch(const void* fatbin, uint64_t size, uint32_t arch);

}  // namespace gpool::proto
