// A client of an etcd cluster's v3 JSON gateway (issue 16), over the HTTP client gpool already has: the
// members are tried in turn, so any member that answers serves. Keys and values travel base64-encoded,
// as the gateway wants. Where etcd's authentication is on, the client asks a member for a token as the
// configured user, sends it with every request, and asks again when etcd no longer takes it. Used by the etcd store (etcd_store.h) and its leader election (etcd_leader.h);
// each thread that talks to etcd has a client of its own.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store.h"

namespace httplib {
class Client;
}

namespace gpool::allocator {

std::string etcdBase64(const std::string& in);
std::string etcdUnbase64(const std::string& in);  // throws StoreError for text that is not base64

class EtcdClient {
 public:
  // `url`: etcd://HOST:PORT[,HOST:PORT...]. Throws StoreError for a malformed URL, or TLS files that
  // cannot be read. `read_timeout_s`: how long one member may take to answer.
  EtcdClient(const std::string& url, int read_timeout_s = 5, EtcdAccess access = {});
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // POSTs `body` to `path` (e.g. /v3/kv/txn) on the first member that answers; returns its JSON answer.
  // Throws StoreError when none answers, or when one refuses the request itself.
  nlohmann::json call(const std::string& path, const nlohmann::json& body);
  // A transaction's compare that holds while `key` is the one created at `revision` (0: while it is absent).
  static nlohmann::json createdAt(const std::string& key, int64_t revision);
  // Puts `key` = `value` (held by etcd lease `lease`, unless 0) only where the key is absent. The answer
  // says whether it did ("succeeded"); where not, responses[0].response_range holds the key as it is.
  nlohmann::json putIfAbsent(const std::string& key, const std::string& value, int64_t lease = 0);
  // Watches from `start_revision` on (a /v3/watch stream) for up to `for_ms`, giving each answer that
  // carries events to `events` until it returns false. Returns false when no member could be watched.
  bool watch(const std::string& key, int64_t start_revision, int for_ms, const std::function<bool(const nlohmann::json&)>& events);
  const std::string& url() const { return url_; }

  // One member's answer: its status (0: none came, `failure` says why) and body.
  struct Answer {
    int status = 0;
    std::string body;
    std::string failure;
  };
  static constexpr size_t kMaxAnswer = 256 << 20;  // more than any answer of gpool's, less than memory

 private:
  std::unique_ptr<httplib::Client> member(const std::string& endpoint, int read_timeout_ms) const;
  // POSTs `body` to `path` on member `i` (with this client's token, unless !with_token).
  Answer post(size_t i, const std::string& path, const std::string& body, bool with_token = true);
  // Asks member `i` for a token as access_.user (/v3/auth/authenticate). Returns false when the member
  // did not answer; throws StoreError when it refused the user or password.
  bool authenticate(size_t i);
  std::string url_;
  EtcdAccess access_;
  std::string token_;  // etcd's token for access_.user; "" before the first, or where authentication is off
  std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<httplib::Client>> clients_;
  size_t current_ = 0;  // the member that answered last
};

}  // namespace gpool::allocator
