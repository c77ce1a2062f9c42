// How gpool-server and the gpool command connect to gpool-allocator over the network: http://HOST:PORT,
// or https://HOST:PORT with the allocator's certificate verified against a CA file (gpool-server
// --allocator-ca, GPOOL_CA_FILE) or else the system's CA store.
//
// Replicas (issue 16): the URL may list several allocators sharing an etcd store, comma-separated. One
// leads; the others answer 503 naming it (standbyLeader). AllocatorReplicas follows: to the leader named,
// else to the next replica, so that a client rides through a failover.
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gpool::token {

// A client for `url` with its timeouts set. Throws std::invalid_argument naming the fix for a URL that is
// neither http:// nor https://, or a CA file that cannot be read.
std::unique_ptr<httplib::Client> allocatorClient(const std::string& url, const std::string& ca_file, int read_timeout_s);

// An answer's header saying how long (ms) its request waited for its client's share of the allocator's
// CPU (--max-client-cpu) before a thread took it; absent when it did not wait.
inline constexpr const char* kHeldHeader = "X-Gpool-Held-Ms";

// The leader a standby named in its answer, or "" when the answer is not a standby's.
std::string standbyLeader(int status, const std::string& body);

class AllocatorReplicas {
 public:
  // `urls`: one URL or several, comma-separated. Throws std::invalid_argument as allocatorClient does.
  AllocatorReplicas(const std::string& urls, std::string ca_file, int read_timeout_s);
  const std::string& url() const { return urls_[current_]; }  // the replica to ask
  httplib::Client& client() { return *clients_[current_]; }
  size_t size() const { return urls_.size(); }
  void startRound() { asked_.assign(urls_.size(), false); }  // a new request: every replica may be asked again
  // After asking url(): no answer came (`leader` ""), or a standby named `leader` (" ": none known).
  // Moves to the leader named (when it is reached the same way, http or https), else to the next replica,
  // each replica once per round. Returns false once every one was asked (then wait, and start another round).
  bool next(const std::string& leader);
  std::string all() const;  // the list, for messages
  // One request to the replica that leads: `send` makes and sends it to the client it is given, afresh for
  // each replica asked (a new nonce, a new credential). Follows standbys' answers to the leader, else
  // asks the next replica, each once. Returns the leader's answer, or else the last one or failure
  // (standbyLeader tells them apart); `passed_over` hears of each replica that did not lead, and what it
  // said.
  httplib::Result ask(const std::function<httplib::Result(httplib::Client&)>& send,
                      const std::function<void(const std::string& url, const std::string& said)>& passed_over = {});

 private:
  size_t indexOf(const std::string& url);  // adds a leader not listed
  std::vector<std::string> urls_;
  std::vector<std::unique_ptr<httplib::Client>> clients_;
  std::string ca_file_;
  int read_timeout_s_;
  size_t current_ = 0;
  std::vector<bool> asked_;  // in this round
};

}  // namespace gpool::token
