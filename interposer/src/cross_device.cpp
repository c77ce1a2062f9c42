// Devices of one lease working together (cross_device.h).
#include "cross_device.h"

#include <algorithm>
#include <cstring>

#include "gpool/protocol/transport.h"
#include "state.h"

namespace gpool::client {

namespace calls = proto::calls;

CrossDevice& crossDevice() {
  static CrossDevice* c = new CrossDevice();  // never destroyed, as State
  return *c;
}

// A one-device lease keeps no copy of any image (nor loads one elsewhere); it keeps a library kernel's
// family all the same, whose attributes are one.
static bool severalDevices() { return State::get().connections() > 1; }

void CrossDevice::noteLibrary(uint64_t library, const void* image, uint64_t size) {
  auto lib = std::make_shared<Library>();
  const auto* p = static_cast<const uint8_t*>(image);
  if (severalDevices()) lib->image.assign(p, p + size);
  lib->on[tags::owner(library) < 0 ? 0 : tags::owner(library)] = library;
  std::lock_guard lock(mu_);
  libraries_[library] = std::move(lib);
}

void CrossDevice::noteKernel(uint64_t kernel, uint64_t library, const std::string& name) {
  std::lock_guard lock(mu_);
  auto lib = libraries_.find(library);
  if (lib == libraries_.end()) return;  // not a library's (a module's functions stay on their device)
  if (auto known = kernels_.find(kernel); known != kernels_.end() && known->second->library == lib->second) return;  // asked again
  auto k = std::make_shared<Kernel>();
  k->library = lib->second;
  k->name = name;
  k->on[std::max(tags::owner(kernel), 0)] = kernel;
  kernels_[kernel] = std::move(k);
}

void CrossDevice::noteAlias(uint64_t handle, uint64_t kernel) {
  std::lock_guard lock(mu_);
  auto k = kernels_.find(kernel);
  if (k == kernels_.end()) return;
  std::shared_ptr<Kernel> of = k->second;
  std::shared_ptr<Kernel>& entry = kernels_[handle];
  if (entry == of) return;  // noted already (cuKernelGetFunction gives the same function each time it is asked)
  entry = of;
  of->aliases.push_back(handle);
}

bool CrossDevice::isKernel(uint64_t handle) {
  std::lock_guard lock(mu_);
  auto found = kernels_.find(handle);
  if (found == kernels_.end()) return false;
  for (const auto& [connection, kernel] : found->second->on)
    if (kernel == handle) return true;
  return false;  // a function got from it (noteAlias)
}

std::vector<uint64_t> CrossDevice::family(uint64_t handle) {
  std::lock_guard lock(mu_);
  auto found = kernels_.find(handle);
  if (found == kernels_.end()) return {};
  std::vector<uint64_t> all = found->second->aliases;
  for (const auto& [connection, kernel] : found->second->on) all.push_back(kernel);
  return all;
}

std::vector<std::pair<int, uint64_t>> CrossDevice::forgetLibrary(uint64_t library) {
  std::lock_guard lock(mu_);
  auto it = libraries_.find(library);
  if (it == libraries_.end()) return {};
  std::shared_ptr<Library> lib = it->second;
  std::vector<std::pair<int, uint64_t>> copies;
  for (auto [connection, handle] : lib->on) {
    if (handle != library) copies.emplace_back(connection, handle);
    libraries_.erase(handle);
  }
  std::erase_if(kernels_, [&](const auto& k) { return k.second->library == lib; });
  return copies;
}

uint64_t CrossDevice::libraryOn(Connection& here, Library& lib) {
  auto it = lib.on.find(here.index());
  if (it != lib.on.end()) return it->second;
  if (lib.image.empty()) return 0;  // (noted in a lease of one device)
  uint64_t handle = 0;
  if (loadImageOn(&here, lib.image.data(), lib.image.size(), 1, handle) != CUDA_SUCCESS) return 0;
  GPOOL_LOG(Level::kDebug, "library of %zu bytes loaded on the lease's worker %d", lib.image.size(), here.index());
  lib.on[here.index()] = handle;
  return handle;
}

uint64_t CrossDevice::translate(Connection& here, uint64_t handle, tags::HandleClass what) {
  AsideScope aside;  // gpool's own loads and lookups
  std::lock_guard lock(mu_);
  if (what == tags::HandleClass::kLibrary) {
    auto lib = libraries_.find(handle);
    if (lib == libraries_.end()) return 0;
    uint64_t there = libraryOn(here, *lib->second);
    if (there) libraries_[there] = lib->second;
    return there;
  }
  auto found = kernels_.find(handle);
  if (found == kernels_.end()) return 0;
  Kernel& k = *found->second;
  // A function got from the kernel (CUfunction) is its context's, as the driver holds it: another device's
  // is refused, where its copy here would run with that device's arguments.
  if (std::none_of(k.on.begin(), k.on.end(), [&](const auto& copy) { return copy.second == handle; })) return 0;
  if (auto it = k.on.find(here.index()); it != k.on.end()) return it->second;
  uint64_t lib = libraryOn(here, *k.library);
  if (!lib) return 0;
  libraries_[lib] = k.library;
  calls::ModuleGetFunction::out::tuple r;
  if (here.call<calls::ModuleGetFunction>(r, proto::ModuleRef{lib, 1}, k.name) != CUDA_SUCCESS) return 0;
  uint64_t there = std::get<0>(r);
  k.on[here.index()] = there;
  kernels_[there] = found->second;
  State::get().setFunctionName(there, k.name);
  return there;
}

uint64_t CrossDevice::openedIn(int from, uint64_t base, int to) {
  AsideScope aside;  // gpool's own handles; a failure they meet is an earlier call's, for the program
  std::lock_guard lock(mu_);
  auto key = std::make_tuple(from, base, to);
  if (auto it = opened_.find(key); it != opened_.end()) return it->second;
  if (apart_.count({from, to})) return 0;
  State& s = State::get();
  CUresult err = CUDA_SUCCESS;
  Connection* src = s.readyOn(from, err);
  Connection* dst = src ? s.readyOn(to, err) : nullptr;
  if (!dst) return 0;
  uint64_t mapped = 0;
  calls::IpcGetMemHandle::out::tuple handle;
  if (src->call<calls::IpcGetMemHandle>(handle, proto::AllocBase{base}) == CUDA_SUCCESS) {
    calls::IpcOpenMemHandle::out::tuple opened;
    int st = dst->call<calls::IpcOpenMemHandle>(opened, std::get<0>(handle), uint32_t{CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS});
    if (st == CUDA_SUCCESS) mapped = std::get<0>(opened).ptr;
    else if (st == CUDA_ERROR_NOT_SUPPORTED) apart_.insert({from, to});  // handles of another host: never
  }
  // 0: this allocation cannot be shared (too small on sim, a pool's, another host's): sent over a link.
  GPOOL_LOG(Level::kDebug, "copies from device %d's allocation at %#llx to device %d: %s", s.deviceOfConnection(from),
            (unsigned long long)base, s.deviceOfConnection(to), mapped ? "direct, between the workers" : "not through CUDA IPC");
  opened_[key] = mapped;
  return mapped;
}

void CrossDevice::closeLocked(int to, uint64_t mapped) {
  AsideScope aside;
  CUresult err = CUDA_SUCCESS;
  if (Connection* c = State::get().readyOn(to, err)) c->call<calls::IpcCloseMemHandle>(proto::IpcMapped{mapped});
}

void CrossDevice::forgetAllocation(int owner, uint64_t base) {
  if (!severalDevices()) return;
  std::lock_guard lock(mu_);
  for (auto it = opened_.lower_bound({owner, base, INT32_MIN}); it != opened_.end() && std::get<0>(it->first) == owner &&
                                                                std::get<1>(it->first) == base;) {
    if (it->second) closeLocked(std::get<2>(it->first), it->second);
    it = opened_.erase(it);
  }
}

void CrossDevice::forgetConnection(int connection) {
  if (!severalDevices()) return;
  std::lock_guard lock(mu_);
  std::erase_if(links_, [&](const auto& l) { return l.first.first == connection || l.first.second == connection; });
  for (auto it = opened_.begin(); it != opened_.end();) {
    bool from = std::get<0>(it->first) == connection, to = std::get<2>(it->first) == connection;
    if (from && !to && it->second) closeLocked(std::get<2>(it->first), it->second);  // its mappings elsewhere
    it = from || to ? opened_.erase(it) : std::next(it);
  }
}

namespace {

bool isLoopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

// Where `from`'s worker reaches `to`'s server: the host this process reached it at, unless that is a
// loopback address and `from`'s server is elsewhere ("" then: the servers cannot tell each other apart).
std::string hostFor(const Connection& from, const Connection& to) {
  std::string host, other;
  uint16_t port = 0;
  if (!proto::parseHostPort(to.address(), host, port) || !proto::parseHostPort(from.address(), other, port)) return "";
  return isLoopback(host) && !isLoopback(other) ? "" : host;
}

// Sets a link up: the receiver listens, the sender connects with the key, the receiver accepts.
std::shared_ptr<CrossDevice::PeerLink> connectLink(Connection& from, Connection& to, std::string& why) {
  std::string host = hostFor(from, to);
  if (host.empty()) {
    why = "the destination's server is on loopback, the source's elsewhere";
    return nullptr;
  }
  AsideScope aside;
  calls::PeerListen::out::tuple listening;
  calls::PeerConnect::out::tuple sending;
  int st = to.call<calls::PeerListen>(listening);
  if (st == 0) st = from.call<calls::PeerConnect>(sending, host, std::get<0>(listening), std::get<1>(listening));
  if (st == 0) st = to.call<calls::PeerAccept>(std::get<2>(listening));
  if (st != 0) {
    why = "no link between the servers (" + std::to_string(st) + ")";
    return nullptr;
  }
  auto link = std::make_shared<CrossDevice::PeerLink>();
  link->send = std::get<0>(sending);
  link->receive = std::get<2>(listening);
  why = "between the servers, to " + host;
  return link;
}

}  // namespace

std::shared_ptr<CrossDevice::PeerLink> CrossDevice::linkBetween(int from, int to) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = links_.try_emplace({from, to});
  if (!fresh) return it->second;
  State& s = State::get();
  CUresult err = CUDA_SUCCESS;
  Connection* src = s.readyOn(from, err);
  Connection* dst = src ? s.readyOn(to, err) : nullptr;
  std::string why = "a device is gone";
  if (dst) it->second = connectLink(*src, *dst, why);
  GPOOL_LOG(Level::kDebug, "copies from device %d to device %d that CUDA IPC cannot make: %s%s", s.deviceOfConnection(from),
            s.deviceOfConnection(to), it->second ? "" : "relayed through this process; ", why.c_str());
  return it->second;
}

CUresult drainStream(uint64_t stream) {
  GPOOL_CONN_OF_HANDLE(conn, stream);
  return static_cast<CUresult>(conn->call<calls::StreamSynchronize>(stream));
}

CUresult onMemoryDevice(Connection* conn, uint64_t& stream, bool& async) {
  int owner = tags::owner(stream);
  if (owner < 0 || owner == conn->index() || State::get().connections() < 2) return CUDA_SUCCESS;
  if (CUresult r = drainStream(stream)) return r;
  stream = 0;
  async = false;
  return CUDA_SUCCESS;
}

namespace {

// Relayed through this process, in pieces; the legacy streams order each piece after the devices'
// earlier work on their blocking streams. Straight to the two connections: the worker's own bytes, with
// none of the managed-memory handling the program's copies get.
CUresult relay(uint64_t dst, Connection* out, uint64_t src, Connection* in, uint64_t bytes) {
  constexpr uint64_t kStage = 64ull << 20;
  std::vector<uint8_t> stage(std::min(bytes, kStage));
  for (uint64_t off = 0; off < bytes;) {
    uint64_t n = std::min(bytes - off, kStage);
    if (int st = in->memcpyDtoH(stage.data(), src + off, n, 0)) return static_cast<CUresult>(st);
    for (uint64_t done = 0; done < n;) {
      uint64_t k = std::min<uint64_t>(n - done, proto::kBulkChunk);
      proto::DevWrite w{dst + off + done, proto::Blob{stage.data() + done, k}};
      bool last = done + k == n;
      int st = last ? out->call<calls::MemcpyHtoD>(w, proto::Stream{0}, 0u) : out->post<calls::MemcpyHtoD>(w, proto::Stream{0}, 0u);
      if (st) return static_cast<CUresult>(st);
      done += k;
    }
    off += n;
  }
  return CUDA_SUCCESS;
}

// Sent by `from`'s worker straight to `to`'s, over their link; false when they have none, or it broke (it
// is then not used again, and the caller relays).
bool sendOverLink(uint64_t dst, int to, Connection* out, uint64_t src, int from, Connection* in, uint64_t bytes) {
  std::shared_ptr<CrossDevice::PeerLink> link = crossDevice().linkBetween(from, to);
  if (!link) return false;
  std::lock_guard lock(link->mu);
  if (link->broken) return false;
  int st = in->post<calls::PeerSend>(link->send, proto::DevRange{src, bytes});
  if (st == 0) st = out->call<calls::PeerReceive>(link->receive, proto::DevRange{dst, bytes});
  if (st == 0) return true;
  link->broken = true;
  GPOOL_LOG(Level::kWarn, "a copy from device %d to device %d between their servers failed (%d); copies between them are relayed through this process from now on",
            State::get().deviceOfConnection(from), State::get().deviceOfConnection(to), st);
  return false;
}

}  // namespace

CUresult copyAcrossDevices(uint64_t dst, int to, uint64_t src, int from, uint64_t bytes, uint64_t stream, bool async) {
  State& s = State::get();
  CUresult err = CUDA_SUCCESS;
  Connection* in = s.readyOn(from, err);
  Connection* out = in ? s.readyOn(to, err) : nullptr;
  if (!out) return err;
  uint64_t base = 0;
  Allocation a;
  uint64_t mapped = s.findAllocation(src, base, a) && a.device && !a.managed && !a.global ? crossDevice().openedIn(from, base, to) : 0;
  if (!mapped) {
    if (CUresult r = drainStream(stream)) return r;
    if (sendOverLink(dst, to, out, src, from, in, bytes)) return CUDA_SUCCESS;
    return relay(dst, out, src, in, bytes);
  }
  // Direct: the destination's worker copies from its mapping of the source. A synchronous copy first
  // lets the source device's earlier work (on its legacy stream) finish, as a synchronous copy does.
  bool own_stream = tags::owner(stream) < 0 || tags::owner(stream) == to;
  if (!own_stream)
    if (CUresult r = drainStream(stream)) return r;
  if (!own_stream || !async)
    if (int st = in->call<calls::StreamSynchronize>(proto::Stream{0})) return static_cast<CUresult>(st);
  uint64_t on = own_stream ? stream : 0;
  proto::DevCopy c{dst, mapped + (src - base), bytes};
  return static_cast<CUresult>(async && own_stream ? out->post<calls::MemcpyDtoD>(c, proto::Stream{on}, 1u)
                                                   : out->call<calls::MemcpyDtoD>(c, proto::Stream{on}, 0u));
}

bool waitAcrossDevices(uint64_t stream, uint64_t event, CUresult& result) {
  if (!severalDevices()) return false;
  State& s = State::get();
  int on = tags::owner(stream) < 0 ? s.currentConnection() : tags::owner(stream);
  int from = tags::owner(event);
  if (from < 0 || from == on) return false;
  CUresult err = CUDA_SUCCESS;
  Connection* c = s.readyOn(from, err);
  result = c ? static_cast<CUresult>(c->call<calls::EventSynchronize>(event)) : err;
  return true;
}

}  // namespace gpool::client
