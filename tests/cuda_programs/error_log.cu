// CUDA's error log (cuLogs*, CUDA 12.9): an iterator at the log's end, nothing to read until something is
// logged, a callback registered and unregistered, flags refused. Through gpool the log holds gpool's own
// reasons, read as a program reads the driver's after a call failed: a function gpool does not support
// says why at every call, to a callback too; a buffer too small for one message is refused; an iterator
// whose messages were overwritten is told how many; a dump to a file holds the same lines.
#include <cuda.h>
#include <cuda_runtime.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "checks.h"

namespace {

struct Heard {
  int messages = 0;
  int warnings = 0;
  std::string last;
};

void CUDA_CB listen(void* data, CUlogLevel level, char* message, size_t length) {
  auto* heard = static_cast<Heard*>(data);
  ++heard->messages;
  if (level == CU_LOG_LEVEL_WARNING) ++heard->warnings;
  heard->last.assign(message, length);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

int main() {
  CK(cudaFree(nullptr));
  auto current = driverEntryPoint<decltype(&cuLogsCurrent)>("cuLogsCurrent", 12090);
  auto toMemory = driverEntryPoint<decltype(&cuLogsDumpToMemory)>("cuLogsDumpToMemory", 12090);
  auto toFile = driverEntryPoint<decltype(&cuLogsDumpToFile)>("cuLogsDumpToFile", 12090);
  auto subscribe = driverEntryPoint<decltype(&cuLogsRegisterCallback)>("cuLogsRegisterCallback", 12090);
  auto unsubscribe = driverEntryPoint<decltype(&cuLogsUnregisterCallback)>("cuLogsUnregisterCallback", 12090);

  CUlogIterator start = 0;
  check(current(&start, 0) == CUDA_SUCCESS, "cuLogsCurrent gives the log's end");
  check(current(&start, 1) == CUDA_ERROR_INVALID_VALUE, "its flags must be 0");
  CUlogIterator at = start;
  std::vector<char> buffer(64 << 10);
  size_t size = buffer.size();
  CUresult r = toMemory(&at, buffer.data(), &size, 0);
  CHECK(r == CUDA_SUCCESS && size == 0 && buffer[0] == '\0', "nothing logged since: an empty dump (%zu bytes)", size);
  Heard heard;
  CUlogsCallbackHandle handle = nullptr;
  check(subscribe(listen, &heard, &handle) == CUDA_SUCCESS && handle != nullptr, "a callback registered");

  if (throughGpool()) {
    // A function gpool refuses, twice: its reason is logged both times, and heard.
    auto multicast = driverEntryPoint<decltype(&cuMulticastGetGranularity)>("cuMulticastGetGranularity", 12010);
    CUmulticastObjectProp prop{};
    size_t granularity = 0;
    check(multicast(&granularity, &prop, CU_MULTICAST_GRANULARITY_MINIMUM) == CUDA_ERROR_NOT_SUPPORTED &&
              multicast(&granularity, &prop, CU_MULTICAST_GRANULARITY_MINIMUM) == CUDA_ERROR_NOT_SUPPORTED,
          "a function gpool does not support, called twice");
    size = 8;
    CUlogIterator kept = at;
    r = toMemory(&at, buffer.data(), &size, 0);
    CHECK(r == CUDA_ERROR_INVALID_VALUE && size == 0 && at == kept, "a buffer too small for one message is refused, the iterator kept");
    size = buffer.size();
    r = toMemory(&at, buffer.data(), &size, 0);
    std::string text(buffer.data(), size);
    CHECK(r == CUDA_SUCCESS && count(text, "cuMulticastGetGranularity is not supported by gpool") == 2 && text.back() == '\n',
          "the log says why, once per call (%zu bytes)", size);
    CHECK(heard.messages == 2 && heard.warnings == 2 && heard.last.find("cuMulticastGetGranularity") != std::string::npos,
          "the callback heard both, as warnings (%d)", heard.messages);
    size = buffer.size();
    r = toMemory(&at, buffer.data(), &size, 0);
    CHECK(r == CUDA_SUCCESS && size == 0, "read once: nothing new after (%zu bytes)", size);

    // A file gets what memory would.
    char path[] = "/tmp/gpool_error_log_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CUlogIterator again = start;
    check(toFile(&again, path, 0) == CUDA_SUCCESS && again == at, "a dump to a file moves its iterator as far");
    std::FILE* f = std::fopen(path, "r");
    std::string written;
    for (int c; f && (c = std::fgetc(f)) != EOF;) written += static_cast<char>(c);
    if (f) std::fclose(f);
    unlink(path);
    check(written == text, "and holds the same lines");

    // More than the log keeps: an old iterator is told how many it lost, and gets the newest.
    for (int i = 0; i < 400; ++i) multicast(&granularity, &prop, CU_MULTICAST_GRANULARITY_MINIMUM);
    CUlogIterator old = start;
    size = buffer.size();
    r = toMemory(&old, buffer.data(), &size, 0);
    text.assign(buffer.data(), size);
    CHECK(r == CUDA_SUCCESS && text.rfind("[gpool: ", 0) == 0 && size <= 25600 + 200 && count(text, "cuMulticast") > 100,
          "an iterator older than the log keeps: told what it lost, then the newest (%zu bytes)", size);
    CHECK(heard.messages == 402, "the callback heard every one (%d)", heard.messages);
  }

  check(unsubscribe(handle) == CUDA_SUCCESS, "the callback unregistered");
  if (throughGpool()) {
    check(unsubscribe(handle) == CUDA_ERROR_INVALID_VALUE, "and not twice");
    const int before = heard.messages;
    auto multicast = driverEntryPoint<decltype(&cuMulticastGetGranularity)>("cuMulticastGetGranularity", 12010);
    CUmulticastObjectProp prop{};
    size_t granularity = 0;
    multicast(&granularity, &prop, CU_MULTICAST_GRANULARITY_MINIMUM);
    CHECK(heard.messages == before, "an unregistered callback hears nothing more (%d)", heard.messages);
  }
  if (failures == 0) std::printf("ALL PASSED\n");
  return failures == 0 ? 0 : 1;
}
