// The partition policy parser (allocator/src/policy.cpp): any text is a policy or a PolicyError; and any
// text as a queue's settings at run time (PUT /v1/queues/NAME) gives a policy that parses, or an error.
#include <cstdint>
#include <string>

#include "policy.h"

namespace {
const std::string kSource = "[queues.vision]\nguarantee = { gpus = 1 }\nmembers = [\"ann\"]\n";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    gpool::allocator::parsePolicy(text);
  } catch (const gpool::allocator::PolicyError&) {
  }
  try {
    gpool::allocator::parsePolicy(gpool::allocator::withQueue(kSource, "vision", &text));
  } catch (const gpool::allocator::PolicyError&) {
  }
  return 0;
}
