#include "shared_budget.h"

#include <new>

#include "shared_page.h"

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
  int fd = -1;
  auto* page = new (createSharedPage(sizeof(Page), kLowestFd, "memory budget", fd)) Page{Page::kMagic, limit, {0}, {}};
  for (auto& s : page->slots) s.store(0);
  return std::shared_ptr<SharedBudget>(new SharedBudget(fd, page));
}

std::shared_ptr<SharedBudget> SharedBudget::adopt(int fd) {
  return std::shared_ptr<SharedBudget>(new SharedBudget(fd, static_cast<Page*>(adoptSharedPage(fd, sizeof(Page), Page::kMagic, "memory budget"))));
}

SharedBudget::~SharedBudget() { releaseSharedPage(page_, sizeof(Page), fd_); }

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

void SharedBudget::reclaimAllBut(int slot, uint64_t bytes) {
  if (uint64_t held = heldBy(slot); held > bytes) release(slot, held - bytes);
}

uint64_t SharedBudget::heldBy(int slot) const { return validSlot(slot) ? page_->slots[slot].load() : 0; }

}  // namespace gpool::budget
