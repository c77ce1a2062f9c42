// The partition policy parser (allocator/src/policy.cpp): any text is a policy or a PolicyError.
#include <cstdint>
#include <string>

#include "policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    gpool::allocator::parsePolicy(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const gpool::allocator::PolicyError&) {
  }
  return 0;
}
