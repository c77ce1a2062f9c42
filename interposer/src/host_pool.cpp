// Page-locked host memory the worker reaches (host_pool.h).
#include "host_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <random>

#include "connection.h"
#include "log.h"

namespace gpool::client {
namespace calls = gpool::proto::calls;

namespace {

// Where to try next when the worker has something at the first address: 1 GiB steps in [16, 64) TiB,
// far from where either process's libraries and heaps are.
void* hint() {
  static std::mt19937_64 rng{std::random_device{}()};
  constexpr uint64_t kGiB = 1ull << 30, kLow = 16ull << 40, kSpan = 48ull << 40;
  return reinterpret_cast<void*>(kLow + rng() % (kSpan / kGiB) * kGiB);
}

}  // namespace

HostPool::~HostPool() {
  if (base_) ::munmap(reinterpret_cast<void*>(base_), bytes_);
  if (fd_ >= 0) ::close(fd_);
}

bool HostPool::attach(Connection& conn, int fd, std::string& why) {
  struct stat st {};
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || seals < 0 || !(seals & F_SEAL_SHRINK)) {
    ::close(fd);
    why = "the worker's pool segment is not a sealed memfd";
    return false;
  }
  fd_ = fd;
  bytes_ = static_cast<uint64_t>(st.st_size);
  page_ = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  for (int i = 0; i < kAttachTries && !base_; ++i) agree(conn, i == 0 ? nullptr : hint());
  if (!base_) {
    why = "no address was free in both processes";
    return false;
  }
  free_[0] = bytes_ / page_ * page_;
  return true;
}

// Maps the segment at `at` (anywhere for nullptr) and asks the worker to map it there too.
bool HostPool::agree(Connection& conn, void* at) {
  void* got = ::mmap(at, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
  if (got == MAP_FAILED) return false;
  auto base = reinterpret_cast<uint64_t>(got);
  AsideScope aside;  // the pool is gpool's own
  int st = conn.call<calls::HostPoolAttach>(proto::HostWindow{base, bytes_});
  if (st == 0) {
    base_ = base;
    // As CUDA does with page-locked memory: a forked child does not inherit it (here it would share it).
    ::madvise(got, bytes_, MADV_DONTFORK);
    return true;
  }
  ::munmap(got, bytes_);
  GPOOL_LOG(Level::kDebug, "shared host memory: the worker cannot map %#llx (CUresult %d)", (unsigned long long)base, st);
  return false;
}

void* HostPool::allocate(Connection& conn, size_t bytes) {
  uint64_t need = (std::max<uint64_t>(bytes, 1) + page_ - 1) / page_ * page_;
  uint64_t at = 0;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(free_.begin(), free_.end(), [&](const auto& f) { return f.second >= need; });
    if (it == free_.end()) return nullptr;
    auto [off, len] = *it;
    free_.erase(it);
    if (len > need) free_[off + need] = len - need;
    at = base_ + off;
    used_[at] = need;
  }
  AsideScope aside;
  if (conn.call<calls::HostPoolRegister>(proto::HostRange{at, need}) == 0) return reinterpret_cast<void*>(at);
  release(conn, reinterpret_cast<void*>(at));  // the worker did not register it; nothing to unregister there
  return nullptr;
}

bool HostPool::release(Connection& conn, void* p) {
  auto at = reinterpret_cast<uint64_t>(p);
  uint64_t len = 0;
  {
    std::lock_guard lock(mu_);
    auto it = used_.find(at);
    if (it == used_.end()) return false;
    len = it->second;
    used_.erase(it);
  }
  AsideScope aside;
  conn.call<calls::HostPoolUnregister>(proto::HostRangeBase{at});  // refused when it never was registered
  uint64_t off = at - base_;
  ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off), static_cast<off_t>(len));
  std::lock_guard lock(mu_);
  auto next = free_.find(off + len);
  if (next != free_.end()) {
    len += next->second;
    free_.erase(next);
  }
  auto prev = free_.lower_bound(off);
  if (prev != free_.begin() && std::prev(prev)->first + std::prev(prev)->second == off) {
    std::prev(prev)->second += len;
  } else {
    free_[off] = len;
  }
  return true;
}

bool HostPool::holds(uint64_t p, uint64_t bytes) const {
  std::lock_guard lock(mu_);
  auto it = used_.upper_bound(p);
  if (it == used_.begin()) return false;
  --it;
  return p - it->first < it->second && bytes <= it->second - (p - it->first);
}

}  // namespace gpool::client
