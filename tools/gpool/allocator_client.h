// How the gpool command reaches gpool-allocator: HTTP or HTTPS (GPOOL_ALLOCATOR=http(s)://HOST:PORT; the
// certificate checked against GPOOL_CA_FILE or the system's CA store) or the allocator's local Unix socket
// (unix:PATH), and what each request proves:
//   kNone      nothing (status, the policy)
//   kIdentity  who is asking: the allocator's key signs admin changes when given; else a service account's
//              key (GPOOL_SERVICE_KEY_FILE); else, over the local socket, nothing more (the kernel says);
//              else a MUNGE credential made for this request
//   kLease     the lease key the allocator returned with the lease (reads, heartbeats and releases it)
#pragma once

#include <httplib.h>

#include <memory>

#include "gpool/allocator/allocator_connection.h"
#include <string>
#include <utility>

namespace gpool::cli {

enum class Proof { kNone, kIdentity, kLease };

class AllocatorClient {
 public:
  // `url`: http(s)://HOST:PORT, several of them comma-separated (allocator replicas: the one that leads
  // answers), or unix:PATH. Throws std::invalid_argument naming the fix for a URL that is none of these.
  AllocatorClient(std::string url, const std::string& ca_file);

  std::string admin_key;     // the allocator's key (gpool admin --key-file)
  std::string service_key;   // a service account's key
  std::string munge_socket;  // munged's socket ("" = its default)
  std::string lease_key;

  // (status, body); status 0 when no allocator could be reached (none, or only standbys, answered: the
  // body says which), kNoProof when no proof could be made (the body says why and what to do: asking
  // again will not help).
  static constexpr int kNoProof = -1;
  std::pair<int, std::string> call(const std::string& method, const std::string& path, Proof proof,
                                   const std::string& body = "", const char* type = "application/json");
  const std::string& url() const { return url_; }
  // A second client with the same allocator and proofs, for a thread of its own (one client's connection
  // serves one request at a time).
  std::unique_ptr<AllocatorClient> another() const;

 private:
  bool proofHeaders(const std::string& method, const std::string& path, const std::string& body, Proof proof,
                    httplib::Headers& h, std::string& why);
  static std::string headerValue(const std::string& head, const std::string& name);
  static void sayHeld(const std::string& held_ms);
  std::pair<int, std::string> overUnixSocket(const std::string& method, const std::string& path, const httplib::Headers& h,
                                             const std::string& body, const char* type);
  std::string url_, ca_file_, socket_path_;
  std::unique_ptr<token::AllocatorReplicas> replicas_;
};

}  // namespace gpool::cli
