#include "shared_budget.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace gpool::budget {

struct SharedBudget::Page {
  static constexpr uint64_t kMagic = 0x67706f6f6c627564ull;  // "gpoolbud"
  uint64_t magic;
  uint64_t limit;
  std::atomic<uint64_t> total;
  std::atomic<uint64_t> slots[kSlots];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the budget is shared between processes");

namespace {

bool validSlot(int slot) { return slot >= 0 && slot < SharedBudget::kSlots; }

// Subtracts at most what `a` holds (a slot or total never goes below zero).
uint64_t takeAway(std::atomic<uint64_t>& a, uint64_t bytes) {
  uint64_t now = a.load();
  uint64_t taken;
  do taken = std::min(now, bytes);
  while (!a.compare_exchange_weak(now, now - taken));
  return taken;
}

}  // namespace

std::shared_ptr<SharedBudget> SharedBudget::create(uint64_t limit) {
  int fd = ::memfd_create("gpool-budget", MFD_CLOEXEC);
  if (fd >= 0 && fd < kLowestFd) {  // above the numbers a worker receives descriptors at (3, 4, 5)
    int high = ::fcntl(fd, F_DUPFD_CLOEXEC, kLowestFd);
    ::close(fd);
    fd = high;
  }
  if (fd < 0 || ::ftruncate(fd, sizeof(Page)) != 0) {
    std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot make a shared memory budget: " + why);
  }
  void* p = ::mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    throw std::runtime_error(std::string("cannot map a shared memory budget: ") + std::strerror(errno));
  }
  auto* page = new (p) Page{Page::kMagic, limit, {0}, {}};
  for (auto& s : page->slots) s.store(0);
  return std::shared_ptr<SharedBudget>(new SharedBudget(fd, page));
}

std::shared_ptr<SharedBudget> SharedBudget::adopt(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != sizeof(Page))
    throw std::runtime_error("descriptor " + std::to_string(fd) + " is not a gpool memory budget");
  void* p = ::mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw std::runtime_error(std::string("cannot map the memory budget: ") + std::strerror(errno));
  auto* page = static_cast<Page*>(p);
  if (page->magic != Page::kMagic) {
    ::munmap(p, sizeof(Page));
    throw std::runtime_error("descriptor " + std::to_string(fd) + " is not a gpool memory budget");
  }
  return std::shared_ptr<SharedBudget>(new SharedBudget(fd, page));
}

SharedBudget::~SharedBudget() {
  ::munmap(page_, sizeof(Page));
  ::close(fd_);
}

uint64_t SharedBudget::limit() const { return page_->limit; }
uint64_t SharedBudget::used() const { return page_->total.load(); }

bool SharedBudget::reserve(int slot, uint64_t bytes) {
  if (!validSlot(slot)) return false;
  uint64_t now = page_->total.load();
  do {
    if (bytes > page_->limit || now > page_->limit - bytes) return false;
  } while (!page_->total.compare_exchange_weak(now, now + bytes));
  page_->slots[slot].fetch_add(bytes);
  return true;
}

void SharedBudget::release(int slot, uint64_t bytes) {
  if (!validSlot(slot)) return;
  takeAway(page_->total, takeAway(page_->slots[slot], bytes));
}

void SharedBudget::add(int slot, uint64_t bytes) {
  if (!validSlot(slot)) return;
  page_->total.fetch_add(bytes);
  page_->slots[slot].fetch_add(bytes);
}

void SharedBudget::reclaim(int slot) {
  if (validSlot(slot)) takeAway(page_->total, page_->slots[slot].exchange(0));
}

uint64_t SharedBudget::heldBy(int slot) const { return validSlot(slot) ? page_->slots[slot].load() : 0; }

}  // namespace gpool::budget
