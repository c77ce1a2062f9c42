// MD2 (RFC 1319) and HMAC-MD2 (RFC 2104) for the runtime's integrity check (CUDA-PRIVATE-INTERFACES.md §3).
// Written here because Debian's OpenSSL 3 is built without MD2.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace gpool::client {

std::array<uint8_t, 16> md2(const void* data, size_t n);
// HMAC with a 16-byte key: exactly one MD2 block, so the key is used as is.
std::array<uint8_t, 16> hmacMd2(const std::array<uint8_t, 16>& key, const void* data, size_t n);

}  // namespace gpool::client
