// The RDMA transport over UCX (ucx_transport.h). Each send is one tagged message (its buffers as an I/O
// vector); recv takes whole messages in order and hands out their bytes. A side that waits progresses its
// UCX worker, spinning briefly, then sleeps on the worker's event descriptor and the TCP link together:
// the link turning readable means the peer's process has gone. UCX calls of one worker are serialised
// by a mutex (the worker's keep-alive thread sends while its loop receives).
#include "gpool/protocol/ucx_transport.h"

#include <dirent.h>
#include <dlfcn.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>

#ifdef GPOOL_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

namespace gpool::proto {

bool hostHasRdmaDevice() {
  DIR* d = ::opendir("/sys/class/infiniband");
  if (!d) return false;
  bool any = false;
  while (dirent* e = ::readdir(d)) any |= e->d_name[0] != '.';
  ::closedir(d);
  return any;
}

#ifndef GPOOL_HAVE_UCX

bool ucxAvailable(std::string& why) {
  why = "this gpool was built without UCX (libucx-dev)";
  return false;
}
std::unique_ptr<UcxEndpoint> makeUcxEndpoint() { throw TransportError("this gpool was built without UCX"); }
std::unique_ptr<Transport> openUcxTransport(std::unique_ptr<UcxEndpoint>, const std::vector<uint8_t>&, const Transport&, std::string) {
  throw TransportError("this gpool was built without UCX");
}

#else

namespace {

constexpr ucp_tag_t kTag = 0x67706f6f6c;  // "gpool": every message of a connection; each worker has one peer
constexpr int kSpins = 2000;              // progress calls before sleeping

// libucp's functions, from dlopen: a host without UCX still runs gpool.
struct Ucx {
#define GPOOL_UCX_FUNCTIONS(F)                                                                               \
  F(ucp_config_read) F(ucp_config_release) F(ucp_init_version) F(ucp_worker_create) F(ucp_worker_destroy)   \
  F(ucp_worker_get_address) F(ucp_worker_release_address) F(ucp_worker_progress) F(ucp_worker_get_efd)       \
  F(ucp_worker_arm) F(ucp_worker_signal) F(ucp_ep_create) F(ucp_ep_close_nbx) F(ucp_tag_send_nbx)           \
  F(ucp_tag_probe_nb) F(ucp_tag_msg_recv_nbx) F(ucp_request_check_status) F(ucp_request_free)               \
  F(ucs_status_string)
#define F(name) decltype(&::name) name = nullptr;
  GPOOL_UCX_FUNCTIONS(F)
#undef F
  ucp_context_h context = nullptr;
  std::string error;

  Ucx() {
    void* lib = ::dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      error = std::string("cannot load libucp.so.0 (UCX): ") + ::dlerror();
      return;
    }
#define F(name)                                                                   \
  if (!(name = reinterpret_cast<decltype(&::name)>(::dlsym(lib, #name)))) {      \
    error = "libucp.so.0 lacks " #name;                                           \
    return;                                                                       \
  }
    GPOOL_UCX_FUNCTIONS(F)
#undef F
  }

  // The process's UCX context, made when the first connection needs it (it looks at every device).
  bool start(std::string& why) {
    std::call_once(started_, [this] {
      if (!error.empty()) return;
      ucp_config_t* config = nullptr;
      ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
      if (st != UCS_OK) {
        error = std::string("UCX configuration: ") + ucs_status_string(st);
        return;
      }
      ucp_params_t params{};
      params.field_mask = UCP_PARAM_FIELD_FEATURES;
      params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
      st = ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context);
      ucp_config_release(config);
      if (st != UCS_OK) error = std::string("UCX did not start: ") + ucs_status_string(st);
    });
    why = error;
    return error.empty();
  }

 private:
  std::once_flag started_;
};

Ucx& ucx() {
  static Ucx u;
  return u;
}

class Endpoint final : public UcxEndpoint {
 public:
  Endpoint() {
    Ucx& u = ucx();
    std::string why;
    if (!u.start(why)) throw TransportError(why);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    if (ucs_status_t st = u.ucp_worker_create(u.context, &wp, &worker); st != UCS_OK)
      throw TransportError(std::string("UCX worker: ") + u.ucs_status_string(st));
    ucp_address_t* a = nullptr;
    size_t n = 0;
    if (u.ucp_worker_get_address(worker, &a, &n) != UCS_OK || u.ucp_worker_get_efd(worker, &efd) != UCS_OK) {
      u.ucp_worker_destroy(worker);
      throw TransportError("UCX worker has no address or event descriptor");
    }
    address_.assign(reinterpret_cast<uint8_t*>(a), reinterpret_cast<uint8_t*>(a) + n);
    u.ucp_worker_release_address(worker, a);
  }
  ~Endpoint() override {
    if (worker) ucx().ucp_worker_destroy(worker);
  }
  const std::vector<uint8_t>& address() const override { return address_; }
  ucp_worker_h worker = nullptr;
  int efd = -1;

 private:
  std::vector<uint8_t> address_;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(std::unique_ptr<Endpoint> local, const std::vector<uint8_t>& remote, int link, std::string peer)
      : u_(ucx()), local_(std::move(local)), link_(link), peer_(std::move(peer)) {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = reinterpret_cast<const ucp_address_t*>(remote.data());
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = [](void* self, ucp_ep_h, ucs_status_t st) { static_cast<UcxTransport*>(self)->failed_ = st; };
    p.err_handler.arg = this;
    if (ucs_status_t st = u_.ucp_ep_create(local_->worker, &p, &ep_); st != UCS_OK)
      throw TransportError("UCX cannot reach " + peer_ + ": " + u_.ucs_status_string(st));
  }
  ~UcxTransport() override {
    std::lock_guard lock(mu_);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* r = u_.ucp_ep_close_nbx(ep_, &p);
    for (int i = 0; UCS_PTR_IS_PTR(r) && i < 100000 && u_.ucp_request_check_status(r) == UCS_INPROGRESS; ++i)
      u_.ucp_worker_progress(local_->worker);
    if (UCS_PTR_IS_PTR(r)) u_.ucp_request_free(r);
  }

  void send(std::span<const ConstBuffer> buffers) override {
    std::vector<ucp_dt_iov_t> iov;
    for (const auto& b : buffers)
      if (b.size) iov.push_back(ucp_dt_iov_t{const_cast<void*>(b.data), b.size});
    if (iov.empty()) return;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = ucp_dt_make_iov();
    void* r;
    {
      std::lock_guard lock(mu_);
      r = u_.ucp_tag_send_nbx(ep_, iov.data(), iov.size(), kTag, &p);
    }
    complete(r, "send to");
  }

  // A whole message the caller asks for lands in its buffer directly; a larger one is kept for the reads
  // that follow.
  void recv(void* data, size_t n, bool idle_ok = false) override {
    auto* out = static_cast<uint8_t*>(data);
    while (n > 0) {
      if (at_ == len_) {
        ucp_tag_recv_info_t info{};
        ucp_tag_message_h msg = probe(idle_ok, info);
        idle_ok = false;
        if (info.length <= n) {
          receive(msg, out, info.length);
          out += info.length;
          n -= info.length;
          continue;
        }
        if (cap_ < info.length) {
          inbox_ = std::make_unique<uint8_t[]>(info.length);  // not zeroed: the message fills it
          cap_ = info.length;
        }
        receive(msg, inbox_.get(), info.length);
        len_ = info.length;
        at_ = 0;
      }
      size_t k = std::min(n, len_ - at_);
      std::memcpy(out, inbox_.get() + at_, k);
      at_ += k;
      out += k;
      n -= k;
    }
  }

  void setStallTimeout(int ms) override { stall_ms_ = ms; }
  void shutdown() override {
    down_ = true;
    std::lock_guard lock(mu_);
    u_.ucp_worker_signal(local_->worker);
  }
  std::string peer() const override { return peer_; }

 private:
  // The next message, once it has arrived (its bytes not yet taken).
  ucp_tag_message_h probe(bool idle_ok, ucp_tag_recv_info_t& info) {
    ucp_tag_message_h msg = nullptr;
    waitUntil(idle_ok, [&] { return (msg = u_.ucp_tag_probe_nb(local_->worker, kTag, ~ucp_tag_t{0}, 1, &info)) != nullptr; });
    return msg;
  }
  void receive(ucp_tag_message_h msg, uint8_t* into, size_t bytes) {
    ucp_request_param_t p{};
    void* r;
    {
      std::lock_guard lock(mu_);
      r = u_.ucp_tag_msg_recv_nbx(local_->worker, into, bytes, msg, &p);
    }
    complete(r, "receive from");
  }

  // Waits for an operation UCX returned: done at once (null), failed, or a request to progress (bounded
  // by the stall timeout: its peer has started it).
  void complete(void* r, const char* what) {
    if (r == nullptr) return;
    if (UCS_PTR_IS_ERR(r)) throw TransportError(std::string(what) + " " + peer_ + " failed: " + u_.ucs_status_string(UCS_PTR_STATUS(r)));
    ucs_status_t st = UCS_INPROGRESS;
    try {
      waitUntil(false, [&] { return (st = u_.ucp_request_check_status(r)) != UCS_INPROGRESS; });
    } catch (...) {
      std::lock_guard lock(mu_);
      u_.ucp_request_free(r);  // UCX completes it when the endpoint closes
      throw;
    }
    std::lock_guard lock(mu_);
    u_.ucp_request_free(r);
    if (st != UCS_OK) throw TransportError(std::string(what) + " " + peer_ + " failed: " + u_.ucs_status_string(st));
  }

  // Progresses the worker until `done` (called under the lock); spins, then sleeps on the worker's event
  // descriptor and the link. Bounded by the stall timeout unless idle_ok.
  template <typename Done>
  void waitUntil(bool idle_ok, Done done) {
    auto start = std::chrono::steady_clock::now();
    for (int spin = 0;; ++spin) {
      {
        std::lock_guard lock(mu_);
        while (u_.ucp_worker_progress(local_->worker) != 0) {
        }
        if (done()) return;
        if (failed_ != UCS_OK) throw TransportError(peer_ + " is gone: " + u_.ucs_status_string(failed_));
        if (down_) throw TransportError("connection to " + peer_ + " shut down");
        if (spin < kSpins || u_.ucp_worker_arm(local_->worker) == UCS_ERR_BUSY) continue;
      }
      pollfd fds[2] = {{local_->efd, POLLIN, 0}, {link_, POLLIN, 0}};
      ::poll(fds, link_ >= 0 ? 2 : 1, 100);
      if (link_ >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) peerGone();
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
      if (!idle_ok && stall_ms_ > 0 && waited > stall_ms_)
        throw TransportStalled(peer_ + " did not answer for " + std::to_string(stall_ms_) + " ms (the stall timeout)");
    }
  }

  // The link turned readable: its end (the peer's process went), or bytes nobody should send after a move.
  [[noreturn]] void peerGone() {
    char byte;
    ssize_t r = ::recv(link_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    throw TransportError(peer_ + (r == 0 ? " closed the connection" : " broke the protocol on its TCP link"));
  }

  Ucx& u_;
  std::unique_ptr<Endpoint> local_;
  ucp_ep_h ep_ = nullptr;
  int link_;
  std::string peer_;
  std::mutex mu_;
  std::unique_ptr<uint8_t[]> inbox_;  // the rest of a message larger than a read
  size_t cap_ = 0, len_ = 0, at_ = 0;
  int stall_ms_ = 0;
  std::atomic<ucs_status_t> failed_{UCS_OK};
  std::atomic<bool> down_{false};
};

}  // namespace

bool ucxAvailable(std::string& why) {
  why = ucx().error;
  return why.empty();
}

std::unique_ptr<UcxEndpoint> makeUcxEndpoint() { return std::make_unique<Endpoint>(); }

std::unique_ptr<Transport> openUcxTransport(std::unique_ptr<UcxEndpoint> local, const std::vector<uint8_t>& remote,
                                            const Transport& link, std::string peer) {
  if (remote.empty() || remote.size() > kMaxUcxAddress) throw TransportError("no UCX address from " + peer);
  std::unique_ptr<Endpoint> mine(static_cast<Endpoint*>(local.release()));
  return std::make_unique<UcxTransport>(std::move(mine), remote, link.liveness(), std::move(peer));
}

#endif

}  // namespace gpool::proto
