// Every calls.def decoder: the first two bytes pick a call, the rest is its payload, decoded as the
// worker decodes a request and as the client decodes a reply (protocol/include/gpool/protocol/wire.h).
#include <cstdint>
#include <tuple>

#include "gpool/protocol/calls.h"

namespace {

template <typename Tuple>
void decode(const uint8_t* p, size_t n) {
  Tuple fields{};
  gpool::proto::Reader r(p, n);
  if (std::apply([&](auto&... v) { return r.getAll(v...); }, fields)) (void)r.atEnd();
}

template <typename C>
void both(const uint8_t* p, size_t n) {
  decode<typename C::in::tuple>(p, n);
  decode<typename C::out::tuple>(p, n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpool::proto;
  if (size < 2) return 0;
  const uint8_t* p = data + 2;
  size_t n = size - 2;
  static constexpr uint16_t kIds[] = {
#define X(name, number, mode, ins, outs) number,
#include "gpool/protocol/calls.def"
#undef X
  };
  uint16_t id = kIds[(data[0] | data[1] << 8) % std::size(kIds)];
  switch (id) {
#define X(name, number, mode, ins, outs) \
  case number:                           \
    both<calls::name>(p, n);             \
    break;
#include "gpool/protocol/calls.def"
#undef X
    default:
      break;
  }
  both<calls::ModuleLoadCached>(p, n);
  return 0;
}
