#include "client_cpu.h"

#include <algorithm>
#include <cmath>

namespace gpool::allocator {

double ClientCpu::rate() const {
  if (total_ <= 0 || of_.empty()) return share_;
  return std::min(share_, total_ / static_cast<double>(of_.size()));
}

double ClientCpu::shareNow() const {
  std::lock_guard lock(mu_);
  return rate();
}

size_t ClientCpu::clients() const {
  std::lock_guard lock(mu_);
  return of_.size();
}

// Up to `now`, each client's share paid in at the rate of the clients asking until then (their count
// changes only once this has run).
void ClientCpu::advance(Clock::time_point now) {
  if (paid_to_ == Clock::time_point{}) paid_to_ = now;
  if (now <= paid_to_) return;
  paid_ns_ += rate() * static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - paid_to_).count());
  paid_to_ = now;
}

// The account as of `now`: what its share paid in since it was last looked at, up to the most it saves
// at its share of now. A new one starts with that most.
ClientCpu::Account& ClientCpu::account(const std::string& client, Clock::time_point now) {
  advance(now);
  double most = mostSaved();
  auto [it, made] = of_.try_emplace(client, Account{most, paid_ns_});
  Account& a = it->second;
  a.saved_ns = std::min(most, a.saved_ns + (paid_ns_ - a.paid_at));
  a.paid_at = paid_ns_;
  return a;
}

bool ClientCpu::allows(const std::string& client, Clock::time_point now) {
  if (!limited()) return true;
  std::lock_guard lock(mu_);
  return account(client, now).saved_ns > 0;
}

int64_t ClientCpu::reserve(const std::string& client, Clock::time_point now) {
  if (!limited()) return 0;
  std::lock_guard lock(mu_);
  Account& a = account(client, now);
  auto usual = static_cast<int64_t>(a.usual_ns);
  a.saved_ns -= static_cast<double>(usual);
  ++a.reserved;
  return usual;
}

void ClientCpu::settle(const std::string& client, int64_t reserved_ns, int64_t used_ns, Clock::time_point now) {
  if (!limited()) return;
  std::lock_guard lock(mu_);
  Account& a = account(client, now);
  a.saved_ns += static_cast<double>(reserved_ns - std::max<int64_t>(used_ns, 0));
  a.usual_ns += (static_cast<double>(std::max<int64_t>(used_ns, 0)) - a.usual_ns) / 8;
  if (a.reserved > 0) --a.reserved;
}

void ClientCpu::charge(const std::string& client, int64_t used_ns, Clock::time_point now) {
  if (!limited() || used_ns <= 0) return;
  std::lock_guard lock(mu_);
  account(client, now).saved_ns -= static_cast<double>(used_ns);
}

ClientCpu::Clock::time_point ClientCpu::clearsAt(const std::string& client, Clock::time_point now) {
  if (!limited()) return now;
  std::lock_guard lock(mu_);
  const Account& a = account(client, now);
  if (a.saved_ns > 0) return now;
  // Just past the moment it owes nothing more (allows() wants it above 0), if its share stays as it is.
  auto ns = static_cast<int64_t>(std::ceil(-a.saved_ns / rate())) + 1;
  return now + std::chrono::nanoseconds(ns);
}

// Also rebases the virtual clock: every account left is brought up to `now`, so paid_ns_ starts again
// from 0 and never grows past what a sweep's interval pays.
void ClientCpu::forget(Clock::time_point now) {
  std::lock_guard lock(mu_);
  advance(now);
  double most = mostSaved();  // (as of the clients asking before; those that saved it are gone)
  for (auto it = of_.begin(); it != of_.end();) {
    Account& a = it->second;
    a.saved_ns = std::min(most, a.saved_ns + (paid_ns_ - a.paid_at));
    a.paid_at = 0;
    it = a.reserved == 0 && a.saved_ns >= most ? of_.erase(it) : std::next(it);
  }
  paid_ns_ = 0;
}

}  // namespace gpool::allocator
