// When an HTTP/1.1 request on a gpool-allocator connection has arrived whole: its head (request line and
// headers, up to an empty line), then as many body bytes as its Content-Length says. The request gate
// (request_gate.h) hands a connection to a thread only then, so that no thread waits for a slow client.
#pragma once

#include <cstddef>
#include <string_view>

namespace gpool::allocator {

constexpr size_t kMaxRequestHead = 64 << 10;  // a request line and headers, together
constexpr size_t kMaxRequestBody = 1 << 20;   // a body, however it is encoded

enum class Arrival {
  kPartial,       // more is to come
  kContinue,      // the head came, saying "Expect: 100-continue": its client waits to be told to send the body
  kWhole,         // the head, and all the body it announces (or a head announcing a body sent in chunks,
                  // which the allocator refuses from its head)
  kUnreadable,    // no end of the head within kMaxRequestHead, or a Content-Length that is no number, or two
  kBodyTooLarge,  // a Content-Length over kMaxRequestBody
};

// What `received` (the bytes of a connection from the start of a request on) holds.
Arrival requestArrival(std::string_view received);

}  // namespace gpool::allocator
