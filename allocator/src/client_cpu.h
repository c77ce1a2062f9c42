// Each client's share of gpool-allocator's CPU (--max-client-cpu, --max-client-cpu-total): what answering a
// client's requests and its TLS handshakes may cost on average, in CPU time per second of the clock. A
// client (an address, for IPv6 its /64 network; a local user) saves up to kSavedSeconds of its share while
// it asks for little, and spends it as it asks. Once it has spent more than it saved, its requests wait in
// the request gate, holding no thread, until its share has paid off what it owes (request_gate.h). So a
// client asking over and over for costly answers, from however many connections, costs the allocator its
// share of the CPU, and the others' requests find the rest.
//
// The clients asking at once (those still paying back what they spent, or with a request out) split the
// total among them: each one's share is the smaller of --max-client-cpu and the total's part for each. So a
// crowd from many addresses costs the allocator the total at most, not a share for each address; and what
// each may save shrinks with its share, so the crowd cannot save up more than kSavedSeconds of the total.
// The shares are paid as a virtual clock: `paid_ns_` is what one client's share paid in since the last
// rebase, each account noting it when looked at, so a change of the clients' count costs no walk over them.
//
// What a request costs is known only once it is answered: a request handed to a thread reserves what the
// client's recent requests cost on average, and pays the difference once answered; so many requests
// arriving together do not all go out on a share that pays for one. One ClientCpu serves every listener
// (TCP, the local socket); it is safe to use from each one's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace gpool::allocator {

class ClientCpu {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kSavedSeconds = 4;  // of its share a client may save up

  // `share`: of one CPU, what each client may use on average (0: no limit). `total`: of one CPU, what the
  // clients asking at once may use together (0: share for each, however many).
  explicit ClientCpu(double share, double total = 0) : share_(share), total_(total) {}
  bool limited() const { return share_ > 0; }
  double share() const { return share_; }
  double total() const { return total_; }

  // Whether `client` may have a request answered now: it owes nothing.
  bool allows(const std::string& client, Clock::time_point now);
  // A request of `client` goes to a thread: what it reserves (ns of CPU), to give to settle().
  int64_t reserve(const std::string& client, Clock::time_point now);
  // It was answered, and cost `used_ns`.
  void settle(const std::string& client, int64_t reserved_ns, int64_t used_ns, Clock::time_point now);
  // What the request gate itself spent on `client`'s connection (reading its requests, sending the rest of
  // its answers): owed as well, but not what its requests usually cost.
  void charge(const std::string& client, int64_t used_ns, Clock::time_point now);
  // When `client`'s share will have paid off what it owes (now, when it owes nothing), at its share of now.
  Clock::time_point clearsAt(const std::string& client, Clock::time_point now);
  // Lets go of the clients that saved their whole share and have nothing reserved: they are as new ones,
  // and no longer ask.
  void forget(Clock::time_point now);
  size_t clients() const;
  // Of one CPU, each client's share now: --max-client-cpu, or the total's part for each of those asking.
  double shareNow() const;

 private:
  struct Account {
    double saved_ns;           // may be below 0: it owes
    double paid_at;            // paid_ns_ when saved_ns was last brought up to date
    double usual_ns = 0;       // what its requests cost, on average of the recent ones
    int reserved = 0;          // requests answered now
  };
  void advance(Clock::time_point now);  // pays paid_ns_ in up to `now`, at the share of the clients asking
  Account& account(const std::string& client, Clock::time_point now);
  double rate() const;  // shareNow(), the lock held
  double mostSaved() const { return rate() * kSavedSeconds * 1e9; }

  const double share_, total_;
  mutable std::mutex mu_;
  double paid_ns_ = 0;      // what one client's share paid since the last rebase (forget)
  Clock::time_point paid_to_{};  // the time paid_ns_ is as of
  std::unordered_map<std::string, Account> of_;
};

}  // namespace gpool::allocator
