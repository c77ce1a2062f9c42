// A page of memory that gpool-server shares with its workers through a memfd: the server makes it and
// hands its descriptor to each worker it spawns, which maps it. What lives in one: shared_budget.h (a
// lease's memory), compute_pace.h (a lease's compute share). Each page starts with its kind's magic number.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpool::budget {

// A new zeroed page of `bytes` bytes, mapped; its memfd (close-on-exec, at a descriptor no lower than
// `lowest`) in `fd`. Throws std::runtime_error naming `what` when it cannot be made.
void* createSharedPage(size_t bytes, int lowest, const char* what, int& fd);
// Maps `fd`, which must be a page of exactly `bytes` bytes starting with `magic`. Throws
// std::runtime_error naming `what` (and the descriptor) when it is not one.
void* adoptSharedPage(int fd, size_t bytes, uint64_t magic, const char* what);
// Unmaps the page and closes its descriptor.
void releaseSharedPage(void* page, size_t bytes, int fd);

}  // namespace gpool::budget
