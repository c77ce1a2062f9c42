// Each client's share of gpool-allocator's CPU (--max-client-cpu): what answering a client's requests and
// its TLS handshakes may cost on average, in CPU time per second of the clock. A client (an address, for
// IPv6 its /64 network; a local user) saves up to kSavedSeconds of its share while it asks for little, and
// spends it as it asks. Once it has spent more than it saved, its requests wait in the request gate, holding
// no thread, until its share has paid off what it owes (request_gate.h). So a client asking over and over
// for costly answers, from however many connections, costs the allocator its share of the CPU, and the
// others' requests find the rest.
//
// What a request costs is known only once it is answered: a request handed to a thread reserves what the
// client's recent requests cost on average, and pays the difference once answered; so many requests
// arriving together do not all go out on a share that pays for one.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace gpool::allocator {

class ClientCpu {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kSavedSeconds = 4;  // of its share a client may save up

  // `share`: of one CPU, what each client may use on average (0: no limit).
  explicit ClientCpu(double share) : share_(share) {}
  bool limited() const { return share_ > 0; }

  // Whether `client` may have a request answered now: it owes nothing.
  bool allows(const std::string& client, Clock::time_point now);
  // A request of `client` goes to a thread: what it reserves (ns of CPU), to give to settle().
  int64_t reserve(const std::string& client, Clock::time_point now);
  // It was answered, and cost `used_ns`.
  void settle(const std::string& client, int64_t reserved_ns, int64_t used_ns, Clock::time_point now);
  // What the request gate itself spent on `client`'s connection (reading its requests, sending the rest of
  // its answers): owed as well, but not what its requests usually cost.
  void charge(const std::string& client, int64_t used_ns, Clock::time_point now);
  // When `client`'s share will have paid off what it owes (now, when it owes nothing).
  Clock::time_point clearsAt(const std::string& client, Clock::time_point now);
  // Lets go of the clients that saved their whole share and have nothing reserved: they are as new ones.
  void forget(Clock::time_point now);
  size_t clients() const { return of_.size(); }

 private:
  struct Account {
    double saved_ns;           // may be below 0: it owes
    Clock::time_point at;      // saved_ns as of then
    double usual_ns = 0;       // what its requests cost, on average of the recent ones
    int reserved = 0;          // requests answered now
  };
  Account& account(const std::string& client, Clock::time_point now);
  double mostSaved() const { return share_ * kSavedSeconds * 1e9; }

  double share_;
  std::unordered_map<std::string, Account> of_;
};

}  // namespace gpool::allocator
