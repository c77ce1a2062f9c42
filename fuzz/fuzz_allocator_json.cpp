// The allocator's JSON readers (allocator/src/model_json.cpp): lease requests and server registrations
// from the network, and the records it reads back from its database. Any JSON is read or refused with
// an exception the handlers catch (std::exception), never a crash.
#include <cstdint>
#include <string>

#include "model_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpool::allocator;
  auto j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  auto attempt = [&j](auto read) {
    try {
      read(j);
    } catch (const std::exception&) {
    }
  };
  attempt(requestFromJson);
  attempt(serverFromJson);
  attempt(leaseFromJson);
  attempt(serviceAccountFromJson);
  return 0;
}
