// gpool wire format: frame header, limits and the little-endian encoder/decoder every message uses.
// docs/protocol.md is the written contract; change both together.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

namespace gpool::proto {

static_assert(std::endian::native == std::endian::little, "gpool's wire format is little endian; so is every supported host");

inline constexpr uint32_t kMagic = 0x4c4f5047;  // "GPOL"
inline constexpr uint16_t kVersionMajor = 2;     // incompatible changes bump this; peers must match
inline constexpr uint16_t kVersionMinor = 14;    // compatible additions (docs/protocol.md)
inline constexpr uint16_t kDefaultPort = 7420;

// A request frame's payload may not exceed this; bulk copies are split into chunks well under it.
inline constexpr uint32_t kMaxRequestPayload = 64u << 20;
inline constexpr uint32_t kBulkChunk = 4u << 20;
inline constexpr uint32_t kMaxStringBytes = 4096;  // symbol names, addresses, tokens

enum FrameFlags : uint16_t {
  kWantsReply = 1u << 0,  // request: the sender waits for a reply frame with the same seq
  kIsReply = 1u << 1,     // reply frame
  // request (2.8): the client library asks for itself, not for the program. Its reply carries its own
  // status; an earlier asynchronous failure stays latched for the program's next wait.
  kAside = 1u << 2,
};

#pragma pack(push, 1)
struct FrameHeader {
  uint32_t length;  // payload bytes that follow the header
  uint16_t msg;     // message number (calls.def), same in the reply
  uint16_t flags;   // FrameFlags
  uint64_t seq;     // request sequence number, echoed in the reply
};
#pragma pack(pop)
static_assert(sizeof(FrameHeader) == 16);

// Bytes carried by a message. Never owns: on the sending side it points at the caller's data, on the
// receiving side into the received frame, which outlives the handler.
struct Blob {
  const void* data = nullptr;
  uint64_t size = 0;
};

// A wire struct (fields.h) names its encoded members, in order, with GPOOL_WIRE_FIELDS; it is encoded
// as those members one after another, with nothing between them.
#define GPOOL_WIRE_FIELDS(...)                                   \
  auto wireFields() { return std::tie(__VA_ARGS__); }            \
  auto wireFields() const { return std::tie(__VA_ARGS__); }

template <typename T>
concept WireStruct = requires(T& v) { v.wireFields(); };

template <typename T>
struct IsVector : std::false_type {};
template <typename E>
struct IsVector<std::vector<E>> : std::bool_constant<std::is_arithmetic_v<E>> {};

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}

  template <typename T>
  void put(const T& v) {
    if constexpr (WireStruct<T>) {
      std::apply([&](const auto&... f) { putAll(f...); }, v.wireFields());
    } else if constexpr (std::is_same_v<T, Blob>) {
      put<uint64_t>(v.size);
      raw(v.data, v.size);
    } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::string_view>) {
      put<uint32_t>(static_cast<uint32_t>(v.size()));
      raw(v.data(), v.size());
    } else if constexpr (IsVector<T>::value) {
      put<uint32_t>(static_cast<uint32_t>(v.size()));
      raw(v.data(), v.size() * sizeof(typename T::value_type));
    } else {
      static_assert(std::is_trivially_copyable_v<T> && (std::is_arithmetic_v<T> || std::is_enum_v<T>),
                    "wire values are integers, floats, enums, Blob or strings");
      raw(&v, sizeof(T));
    }
  }
  template <typename... T>
  void putAll(const T&... v) { (put(v), ...); }
  void raw(const void* p, size_t n) {
    if (n == 0) return;
    size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, p, n);
  }

 private:
  std::vector<uint8_t>& out_;
};

// Decodes untrusted bytes: every read is bounds-checked; after a failed read ok() is false and every
// later read fails too, so a handler checks once at the end.
class Reader {
 public:
  Reader(const void* p, size_t n) : p_(static_cast<const uint8_t*>(p)), end_(p_ + n) {}

  template <typename T>
  bool get(T& v) {
    if constexpr (WireStruct<T>) {
      return std::apply([&](auto&... f) { return getAll(f...); }, v.wireFields());
    } else if constexpr (std::is_same_v<T, Blob>) {
      uint64_t n = 0;
      if (!get(n) || n > remaining()) return fail();
      v.data = p_;
      v.size = n;
      p_ += n;
      return true;
    } else if constexpr (std::is_same_v<T, std::string>) {
      uint32_t n = 0;
      if (!get(n) || n > kMaxStringBytes || n > remaining()) return fail();
      v.assign(reinterpret_cast<const char*>(p_), n);
      p_ += n;
      return true;
    } else if constexpr (IsVector<T>::value) {
      uint32_t n = 0;
      using E = typename T::value_type;
      if (!get(n) || uint64_t{n} * sizeof(E) > remaining()) return fail();
      v.resize(n);
      if (n) std::memcpy(v.data(), p_, n * sizeof(E));  // an empty vector's data() may be null
      p_ += n * sizeof(E);
      return true;
    } else {
      if (!ok_ || sizeof(T) > remaining()) return fail();
      std::memcpy(&v, p_, sizeof(T));
      p_ += sizeof(T);
      return true;
    }
  }
  template <typename... T>
  bool getAll(T&... v) { return (get(v) && ...); }
  bool ok() const { return ok_; }
  bool atEnd() const { return ok_ && p_ == end_; }
  size_t remaining() const { return ok_ ? static_cast<size_t>(end_ - p_) : 0; }

 private:
  bool fail() { ok_ = false; return false; }
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

}  // namespace gpool::proto
