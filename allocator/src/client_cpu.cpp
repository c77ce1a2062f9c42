#include "client_cpu.h"

#include <algorithm>
#include <cmath>

namespace gpool::allocator {

// The account as of `now`: what the share paid in since it was last looked at, up to the most it saves.
ClientCpu::Account& ClientCpu::account(const std::string& client, Clock::time_point now) {
  auto [it, made] = of_.try_emplace(client, Account{mostSaved(), now});
  Account& a = it->second;
  if (!made && now > a.at) {
    double paid = share_ * static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - a.at).count());
    a.saved_ns = std::min(mostSaved(), a.saved_ns + paid);
    a.at = now;
  }
  return a;
}

bool ClientCpu::allows(const std::string& client, Clock::time_point now) {
  if (!limited()) return true;
  return account(client, now).saved_ns > 0;
}

int64_t ClientCpu::reserve(const std::string& client, Clock::time_point now) {
  if (!limited()) return 0;
  Account& a = account(client, now);
  auto usual = static_cast<int64_t>(a.usual_ns);
  a.saved_ns -= static_cast<double>(usual);
  ++a.reserved;
  return usual;
}

void ClientCpu::settle(const std::string& client, int64_t reserved_ns, int64_t used_ns, Clock::time_point now) {
  if (!limited()) return;
  Account& a = account(client, now);
  a.saved_ns += static_cast<double>(reserved_ns - std::max<int64_t>(used_ns, 0));
  a.usual_ns += (static_cast<double>(std::max<int64_t>(used_ns, 0)) - a.usual_ns) / 8;
  if (a.reserved > 0) --a.reserved;
}

void ClientCpu::charge(const std::string& client, int64_t used_ns, Clock::time_point now) {
  if (limited() && used_ns > 0) account(client, now).saved_ns -= static_cast<double>(used_ns);
}

ClientCpu::Clock::time_point ClientCpu::clearsAt(const std::string& client, Clock::time_point now) {
  if (!limited()) return now;
  const Account& a = account(client, now);
  if (a.saved_ns > 0) return now;
  // Just past the moment it owes nothing more (allows() wants it above 0).
  auto ns = static_cast<int64_t>(std::ceil(-a.saved_ns / share_)) + 1;
  return now + std::chrono::nanoseconds(ns);
}

void ClientCpu::forget(Clock::time_point now) {
  for (auto it = of_.begin(); it != of_.end();) {
    Account& a = account(it->first, now);
    it = a.reserved == 0 && a.saved_ns >= mostSaved() ? of_.erase(it) : std::next(it);
  }
}

}  // namespace gpool::allocator
