// When the allocator's request gate takes a request as whole (allocator/src/request_arrival.cpp): any bytes
// give an answer; one whole stays whole as more bytes come (the head's end and length are settled); and
// what is still coming is never more than a head and a body at their largest.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "request_arrival.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using gpool::allocator::Arrival;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Arrival a = gpool::allocator::requestArrival(bytes);
  if ((a == Arrival::kPartial || a == Arrival::kContinue) &&
      bytes.size() > gpool::allocator::kMaxRequestHead + gpool::allocator::kMaxRequestBody)
    std::abort();
  if (a != Arrival::kPartial && a != Arrival::kContinue && gpool::allocator::requestArrival(bytes + "\r\n\r\nx") != a)
    std::abort();
  return 0;
}
