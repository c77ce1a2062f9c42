// Host functions (cuLaunchHostFunc, cuStreamAddCallback). The function runs here, on a thread of this
// library, when the worker says its turn has come on its stream; the worker holds back the work queued
// after it until this side answers that it has returned. The worker's word comes on a channel of its own
// (server/worker/host_callbacks.h), one per worker of the lease, opened at the first host function that
// worker calls. As in CUDA, a host function must not call CUDA itself.
#include <unistd.h>

#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "state.h"
#include "captured_copies.h"
#include "host_rows.h"
#include "host_work_order.h"
#include "gpool/protocol/shm_transport.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

struct Pending {
  std::function<void()> fn;
  bool keep = false;  // launched into a stream capture: runs again at every replay of the graph
  CUhostFn host = nullptr;  // cuLaunchHostFunc's function and argument, which a captured node's getter gives
  void* data = nullptr;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<uint64_t, Pending> pending;
  uint64_t next_id = 1;
  std::unordered_set<int> opened;  // the connections whose channel is open; the thread serving one owns it
};
// Never destroyed: the channels' threads are detached and may still serve while the process exits.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// Runs the function `id`, when the worker says it is due, and answers once it has returned.
void runDue(gpool::proto::Transport& channel, const gpool::proto::FrameHeader& h) {
  uint64_t id = 0;
  if (h.length != sizeof id) throw gpool::proto::ProtocolError("a malformed host function on the host-function channel");
  channel.recv(&id, sizeof id);
  std::function<void()> fn;
  {
    Registry& reg = registry();
    std::lock_guard lock(reg.mu);
    auto it = reg.pending.find(id);
    if (it != reg.pending.end()) {
      fn = it->second.fn;
      if (!it->second.keep) reg.pending.erase(it);
    }
  }
  if (fn) {
    fn();
    publishHostWork();
  } else GPOOL_LOG(Level::kWarn, "the worker named host function %llu, which this process does not know", (unsigned long long)id);
  gpool::proto::sendFrame(channel, gpool::proto::kMsgHostFuncDue, gpool::proto::kIsReply, h.seq, &id, sizeof id);
}

// Serves the worker's word on one channel: host functions due, and captured copies' rows.
void serve(std::shared_ptr<gpool::proto::Transport> channel) {
  try {
    for (;;) {
      gpool::proto::FrameHeader h = gpool::proto::recvHeader(*channel, UINT32_MAX);
      if (h.flags & gpool::proto::kIsReply) break;
      acquireRequests();
      if (h.msg == gpool::proto::kMsgHostFuncDue) runDue(*channel, h);
      else if (!serveHostRows(*channel, h)) break;
    }
  } catch (const std::exception& e) {
    GPOOL_LOG(Level::kDebug, "host-function channel closed: %s", e.what());
  }
}

// Starts serving `channel` on a thread of its own, which lives as long as the process or the channel.
void startServing(std::shared_ptr<gpool::proto::Transport> channel) { std::thread(serve, std::move(channel)).detach(); }

enum class LocalChannel { kOpen, kNotOffered, kFailed };

// The channel to a worker on this host, over shared memory: the worker takes the connection as soon as it
// comes and hands over the segment. kNotOffered: the worker is on another host or older (ask for TCP).
LocalChannel openLocalChannel(Connection* conn) {
  calls::HostFuncChannelLocal::out::tuple out;
  if (conn->call<calls::HostFuncChannelLocal>(out, gpool::proto::shmHostIdentity()) != CUDA_SUCCESS) return LocalChannel::kNotOffered;
  int pool = -1;
  try {
    startServing(gpool::proto::joinShm(gpool::proto::knockShm(std::get<0>(out), std::get<1>(out)), 5000, pool,
                                       "host-function channel of " + conn->address()));
  } catch (const std::exception& e) {
    GPOOL_LOG(Level::kError, "cannot open the host-function channel to the worker over shared memory (%s); host functions "
              "cannot run", e.what());
    return LocalChannel::kFailed;
  }
  if (pool >= 0) ::close(pool);  // never sent on this channel
  return LocalChannel::kOpen;
}

// The channel over TCP: the worker listens on a port of its host and wants its token first.
CUresult openTcpChannel(Connection* conn) {
  calls::HostFuncChannel::out::tuple out;
  if (int st = conn->call<calls::HostFuncChannel>(out)) return static_cast<CUresult>(st);
  std::string host;
  uint16_t ignored = 0;
  if (!gpool::proto::parseHostPort(conn->address(), host, ignored)) return CUDA_ERROR_INVALID_VALUE;
  try {
    std::shared_ptr<gpool::proto::Transport> channel = gpool::proto::connectTcp(host + ":" + std::to_string(std::get<0>(out)));
    const std::vector<uint8_t>& token = std::get<1>(out);
    gpool::proto::ConstBuffer b{token.data(), token.size()};
    channel->send(std::span(&b, 1));
    startServing(std::move(channel));
  } catch (const std::exception& e) {
    GPOOL_LOG(Level::kError, "cannot open the host-function channel to the worker (%s); host functions cannot run", e.what());
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

}  // namespace

// Opens `conn`'s channel once: over shared memory when the connection is, else over TCP.
CUresult gpool::client::openHostChannel(Connection* conn) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  if (reg.opened.count(conn->index())) return CUDA_SUCCESS;
  AsideScope aside;  // gpool's own requests
  LocalChannel local = conn->sharesMemory() ? openLocalChannel(conn) : LocalChannel::kNotOffered;
  if (local == LocalChannel::kFailed) return CUDA_ERROR_NOT_SUPPORTED;
  if (local == LocalChannel::kNotOffered)
    if (CUresult r = openTcpChannel(conn)) return r;
  reg.opened.insert(conn->index());
  return CUDA_SUCCESS;
}

namespace {

// On the stream's device, whichever is current. `host` and `data`: cuLaunchHostFunc's.
CUresult launch(uint64_t stream, std::function<void()> fn, CUhostFn host = nullptr, void* data = nullptr) {
  GPOOL_CONN_OF_HANDLE(conn, stream);
  if (CUresult r = openHostChannel(conn)) return r;
  uint64_t id;
  {
    Registry& reg = registry();
    std::lock_guard lock(reg.mu);
    id = reg.next_id++;
    reg.pending[id] = Pending{std::move(fn), State::get().active_captures > 0, host, data};
  }
  return static_cast<CUresult>(conn->post<calls::LaunchHostFunc>(stream, id));
}

}  // namespace

bool gpool::client::hostFunctionOf(uint64_t id, CUhostFn& fn, void*& data) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  auto it = reg.pending.find(id);
  if (it == reg.pending.end() || !it->second.host) return false;
  fn = it->second.host, data = it->second.data;
  return true;
}

CUresult gpool::client::hostFunctionId(Connection* conn, std::function<void()> fn, uint64_t& id, bool once) {
  if (CUresult r = openHostChannel(conn)) return r;
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  id = reg.next_id++;
  reg.pending[id] = Pending{std::move(fn), !once};
  return CUDA_SUCCESS;
}

GPOOL_EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void* data) {
  GPOOL_TRY
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  return launch(streamArg(s, false), [fn, data] { fn(data); }, fn, data);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* data) {
  GPOOL_TRY
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  return launch(streamArg(s, true), [fn, data] { fn(data); }, fn, data);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void* data, unsigned int flags) {
  GPOOL_TRY
  if (!cb || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return launch(streamArg(s, false), [cb, s, data] { cb(s, CUDA_SUCCESS, data); });
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void* data, unsigned int flags) {
  GPOOL_TRY
  if (!cb || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return launch(streamArg(s, true), [cb, s, data] { cb(s, CUDA_SUCCESS, data); });
  GPOOL_CATCH
}
