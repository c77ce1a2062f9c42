// Client state: connecting at cuInit and the local caches (see state.h).
#include "state.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <thread>

#include "cross_device.h"
#include "gpool/protocol/gpu_uuid.h"
#include "lease_shares.h"
#include "visible_devices.h"

namespace gpool::client {
namespace {

// GPOOL_WORKER_TIMEOUT: seconds a call may wait without a word from the worker (0: no bound).
std::chrono::milliseconds workerTimeout() {
  const char* env = std::getenv("GPOOL_WORKER_TIMEOUT");
  if (!env || !*env) return Connection::kDefaultWorkerTimeout;
  char* end = nullptr;
  double seconds = std::strtod(env, &end);
  if (end == env || *end || !(seconds >= 0) || seconds > 86400) {
    GPOOL_LOG(Level::kWarn, "GPOOL_WORKER_TIMEOUT=%s is not a number of seconds from 0 to 86400; using %lld",
              env, static_cast<long long>(Connection::kDefaultWorkerTimeout.count() / 1000));
    return Connection::kDefaultWorkerTimeout;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// A connection to share `s`'s worker. A server closes a connection before answering its hello when this
// host has its share of handshakes in progress there (gpool-server --max-pending-per-address): other
// processes of this host are starting. That is tried again, after 50 ms, then twice as long each time,
// for about 3 s in all.
std::unique_ptr<Connection> connectShare(const Share& s) {
  for (int delay_ms = 50;; delay_ms *= 2) {
    try {
      return std::make_unique<Connection>(proto::connectTcp(s.address), s.address, s.device, s.token, workerTimeout());
    } catch (const proto::TransportClosed& e) {
      if (delay_ms > 1600) throw;
      GPOOL_LOG(Level::kDebug, "gpool-server at %s closed the connection before it answered (%s); trying again in %d ms",
                s.address.c_str(), e.what(), delay_ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    }
  }
}

}  // namespace

std::vector<CUcontext>& State::ctxStack() {
  // Never destroyed: the runtime calls in from exit handlers, after the thread's thread_locals are gone.
  thread_local auto* stack = new std::vector<CUcontext>();
  return *stack;
}

State& State::get() {
  static State* s = new State();  // never destroyed: the runtime calls in from atexit handlers
  return *s;
}

CUresult State::init() {
  // Nothing may leave the function call_once runs: with libstdc++ an exception out of it ends the process
  // (std::terminate) instead of reaching the entry point's GPOOL_CATCH.
  std::call_once(once_, [this] {
    try {
      std::string why;
      std::vector<Share> lease = leaseShares(why);
      if (lease.empty()) {
        GPOOL_LOG(Level::kError, "no lease: %s; CUDA reports no device", why.c_str());
        init_result_ = CUDA_ERROR_NO_DEVICE;
        return;
      }
      init_result_ = connectVisible(lease);
    } catch (const std::exception& e) {
      GPOOL_LOG(Level::kError, "cannot start: %s; CUDA reports no device", e.what());
      init_result_ = CUDA_ERROR_NO_DEVICE;
    }
  });
  return init_result_;
}

// Connects to the lease's devices CUDA_VISIBLE_DEVICES shows (visible_devices.h): by index, to those only;
// by UUID, to every one, to learn the UUIDs, keeping those it names.
CUresult State::connectVisible(const std::vector<Share>& lease) {
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  const int count = static_cast<int>(lease.size());
  const bool by_uuid = namesDevicesByUuid(env);
  std::string ignored;
  std::vector<int> positions = visibleDevices(by_uuid ? nullptr : env, count, {}, ignored);
  std::vector<std::unique_ptr<Connection>> conns;
  if (!positions.empty() && !connectShares(lease, positions, conns)) return CUDA_ERROR_NO_DEVICE;
  showDistinctUuids(lease, positions, conns);
  if (by_uuid) {
    std::vector<std::string> uuids;
    for (auto& c : conns) uuids.push_back(proto::gpuUuidText(c->hello().devices.at(0).uuid.data()));
    std::vector<int> chosen = visibleDevices(env, count, uuids, ignored);
    std::vector<std::unique_ptr<Connection>> kept;
    for (int i : chosen) kept.push_back(std::move(conns[static_cast<size_t>(i)]));
    conns = std::move(kept);  // the others close: their workers end
  }
  if (!ignored.empty())
    GPOOL_LOG(Level::kWarn, "CUDA_VISIBLE_DEVICES entry \"%s\" names none of the lease's devices 0..%d (or names one twice, "
              "or the start of several UUIDs); it and the entries after it are ignored", ignored.c_str(), count - 1);
  if (conns.empty()) {
    GPOOL_LOG(Level::kError, "CUDA_VISIBLE_DEVICES hides every device of the lease; CUDA reports no device");
    return CUDA_ERROR_NO_DEVICE;
  }
  adopt(std::move(conns));
  return CUDA_SUCCESS;
}

// Connects to the shares at `positions` at once (each server starts a worker that opens its device); any
// that fails fails them all, as a machine missing a GPU it should have.
bool State::connectShares(const std::vector<Share>& lease, const std::vector<int>& positions,
                          std::vector<std::unique_ptr<Connection>>& conns) {
  std::vector<std::future<std::unique_ptr<Connection>>> pending;
  for (int p : positions)
    pending.push_back(std::async(std::launch::async, [&s = lease[static_cast<size_t>(p)]] { return connectShare(s); }));
  std::string failed;
  for (auto& f : pending) {
    try {
      conns.push_back(f.get());
    } catch (const std::exception& e) {
      failed += (failed.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  if (failed.empty()) return true;
  conns.clear();
  GPOOL_LOG(Level::kError, "%s; CUDA reports no device (set GPOOL_SERVER=HOST:PORT to a running gpool-server)", failed.c_str());
  return false;
}

// Gives each connected device the UUID it shows, the same whichever of the lease's devices are visible.
void State::showDistinctUuids(const std::vector<Share>& lease, const std::vector<int>& positions,
                              std::vector<std::unique_ptr<Connection>>& conns) {
  std::vector<bool> repeat = repeatedShares(lease);
  std::vector<LeaseDevice> devices;
  for (size_t i = 0; i < conns.size(); ++i)
    devices.push_back({positions[i], conns[i]->hello().devices.at(0).uuid, repeat[static_cast<size_t>(positions[i])]});
  keepUuidsApart(devices);
  for (size_t i = 0; i < conns.size(); ++i) conns[i]->showUuid(0, devices[i].uuid);
}

// This process maps every worker's page-locked pool (host_pool.h) at the address that worker maps it, so
// no other device of the lease may place memory there: each other worker keeps the range free. Otherwise
// another device's address could be this process's host memory too (ambiguous for cudaMemcpyDefault), and a
// range reserved on one device could not be reserved again in the worker of memory mapped into it.
static void keepPoolsApart(const std::vector<std::unique_ptr<Connection>>& conns) {
  AsideScope aside;  // gpool's own calls
  for (const auto& owner : conns) {
    const HostPool* pool = owner->hostPool();
    if (!pool || !pool->base()) continue;
    for (const auto& other : conns) {
      if (other == owner) continue;
      int st = other->call<proto::calls::HostPoolKeepFree>(proto::KeptFree{pool->base(), pool->bytes()});
      if (st != CUDA_SUCCESS)
        GPOOL_LOG(Level::kDebug, "the worker at %s could not keep %#llx (%llu bytes) free for the pool of the worker at %s "
                  "(status %d): its device addresses may coincide with that page-locked memory",
                  other->address().c_str(), (unsigned long long)pool->base(), (unsigned long long)pool->bytes(),
                  owner->address().c_str(), st);
    }
  }
}

// The visible devices, in order, become this process's devices 0..N-1.
void State::adopt(std::vector<std::unique_ptr<Connection>> conns) {
  conns_ = std::move(conns);
  for (size_t c = 0; c < conns_.size(); ++c) {
    if (conns_.size() > 1) conns_[c]->joinLease(static_cast<int>(c), &crossDevice());
    for (uint32_t local = 0; local < conns_[c]->hello().devices.size(); ++local) devices_.push_back({static_cast<int>(c), local});
    GPOOL_LOG(Level::kInfo, "connected to gpool-server at %s: %s (%s backend, driver %u, over %s)", conns_[c]->address().c_str(),
              conns_[c]->hello().devices[0].name.c_str(), conns_[c]->hello().backend.c_str(), conns_[c]->hello().driver_version,
              conns_[c]->transportKind());
  }
  if (conns_.size() > 1) keepPoolsApart(conns_);
  current_pools_ = std::make_unique<std::atomic<uint64_t>[]>(conns_.size());
  primary_ = std::vector<Context>(devices_.size());  // (made in place: a Context does not move)
  for (size_t i = 0; i < primary_.size(); ++i) {
    primary_[i].device = static_cast<int>(i);
    primary_[i].id = i + 1;
  }
}

Connection* State::readyOn(int connection, CUresult& err) {
  if (conns_.empty()) {
    err = init_result_ == CUDA_SUCCESS ? CUDA_ERROR_NOT_INITIALIZED : init_result_;
    return nullptr;
  }
  if (connection < 0 || static_cast<size_t>(connection) >= conns_.size()) {
    err = CUDA_ERROR_INVALID_HANDLE;
    return nullptr;
  }
  Connection* c = conns_[static_cast<size_t>(connection)].get();
  if (int lost = c->lost()) {
    err = static_cast<CUresult>(lost);
    return nullptr;
  }
  return c;
}

Connection* State::readyForHandle(uint64_t handle, CUresult& err) { return readyOn(connectionOfHandle(handle), err); }

int State::connectionOfHandle(uint64_t handle) const {
  int owner = conns_.size() > 1 ? tags::owner(handle) : -1;
  return owner < 0 ? currentConnection() : owner;
}

CUdevice State::deviceOfHandle(uint64_t handle) const {
  int owner = conns_.size() > 1 ? tags::owner(handle) : -1;
  return owner < 0 ? currentDevice() : deviceOfConnection(owner);
}

CUdevice State::deviceOfConnection(int connection) const {
  for (size_t d = 0; d < devices_.size(); ++d)
    if (devices_[d].connection == connection) return static_cast<CUdevice>(d);
  return 0;
}

int State::connectionOf(CUdevice d) const {
  if (d < 0 || static_cast<size_t>(d) >= devices_.size()) return -1;
  return devices_[static_cast<size_t>(d)].connection;
}

int State::currentConnection() const {
  return conns_.size() < 2 ? 0 : connectionOf(currentDevice());
}

int State::connectionOfPointer(uint64_t ptr) {
  if (conns_.size() < 2) return 0;
  uint64_t base;
  Allocation a;
  return findAllocation(ptr, base, a) && a.device ? a.owner : currentConnection();
}

const proto::DeviceInfo* State::device(CUdevice d) const {
  if (d < 0 || static_cast<size_t>(d) >= devices_.size()) return nullptr;
  const DeviceSlot& slot = devices_[static_cast<size_t>(d)];
  return &conns_[static_cast<size_t>(slot.connection)]->hello().devices[slot.local];
}

int State::attribute(CUdevice d, int attr) const {
  // Managed memory is emulated with copies at synchronisation points (api_managed.cpp): the host may not
  // touch it while the device works, as on a device without concurrent managed access.
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: return 0;
    // Virtual memory and pools are the worker's on every backend, shared between processes as POSIX file
    // descriptors (api_shareable_handle.cpp), never as Windows or fabric handles.
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    // The device runs in the worker's process: it shares no function pointers with this one
    // (cuLibraryGetUnifiedFunction, api_module.cpp).
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: return 0;
    default: break;
  }
  const auto* dev = device(d);
  if (!dev || attr < 0 || static_cast<size_t>(attr) >= dev->attributes.size()) return 0;
  return dev->attributes[static_cast<size_t>(attr)];
}

bool State::isPrimary(CUcontext c) const {
  for (const auto& p : primary_)
    if (reinterpret_cast<const Context*>(c) == &p) return true;
  return false;
}

bool State::isContext(CUcontext c) const {
  if (isPrimary(c)) return true;
  std::lock_guard lock(const_cast<std::mutex&>(mu));
  for (const auto& x : created_)
    if (reinterpret_cast<const Context*>(c) == &x) return true;
  return false;
}

CUcontext State::createContext(CUdevice d, unsigned flags) {
  std::lock_guard lock(mu);
  Context& c = created_.emplace_back();
  c.device = d;
  c.refs = 1;
  c.flags = flags;
  c.id = next_context_id_++;
  return reinterpret_cast<CUcontext>(&c);
}

bool State::destroyContext(CUcontext ctx) {
  Context* c = nullptr;
  {
    std::lock_guard lock(mu);
    for (auto& x : created_)
      if (reinterpret_cast<CUcontext>(&x) == ctx) c = &x;
  }
  if (!c) return false;
  destroyLocalStorage(c);
  std::lock_guard lock(mu);
  // Kept, no longer a context: another thread may still have it current, and reads it.
  auto it = std::find_if(created_.begin(), created_.end(), [c](const Context& x) { return &x == c; });
  c->green = c->green_stream = 0;
  c->destroyed = true;
  retired_.splice(retired_.end(), created_, it);
  return true;
}

void State::forgetFunctions() {
  std::lock_guard lock(mu);
  layouts_.clear();
  func_attrs_.clear();
  occupancy_.clear();
}

void State::forgetDeviceState(int connection) {
  std::lock_guard lock(mu);
  for (auto it = allocations_.begin(); it != allocations_.end();)
    it = it->second.device && it->second.owner == connection ? eraseLocked(it) : std::next(it);
  layouts_.clear();
  func_attrs_.clear();
  occupancy_.clear();
  std::erase_if(streams_, [&](const auto& s) { return std::max(tags::owner(s.first), 0) == connection; });
  for (auto it = reservations_.begin(); it != reservations_.end();) {  // the worker let go of its ranges
    std::erase(it->second.holders, connection);
    it = it->second.holders.empty() ? reservations_.erase(it) : std::next(it);
  }
  current_pools_[static_cast<size_t>(connection)] = 0;
}

void State::destroyLocalStorage(Context* c) {
  std::map<void*, Context::Slot> slots;
  {
    std::lock_guard lock(mu);
    slots.swap(c->local_storage);
  }
  for (auto& [key, slot] : slots)
    if (slot.dtor) slot.dtor(reinterpret_cast<CUcontext>(c), key, slot.value);
}

// With mu held: records an allocation; device memory's addresses are kept out of this process's own.
void State::insertLocked(uint64_t base, const Allocation& made, int owner) {
  auto it = allocations_.find(base);
  if (it != allocations_.end()) eraseLocked(it);
  Allocation a = made;
  a.owner = owner >= 0 ? owner : currentConnection();  // by default the call went to the current device's worker
  if (a.device && !a.managed && clashesLocked(base, a.size, a.owner))
    GPOOL_LOG(Level::kWarn, "device memory at %#llx (%llu bytes) overlaps another device's: copies and pointer queries "
              "may take it for the other device's", (unsigned long long)base, (unsigned long long)a.size);
  allocations_.emplace(base, a);
  if (a.graph) ++graph_allocations;
  if (a.managed) return;  // mapped here by api_managed.cpp
  if (!a.device) {
    ++host_allocations;
  } else if (!address_space_.reserve(base, a.size)) {
    GPOOL_LOG(Level::kWarn, "device memory at %#llx (%llu bytes) lies where this process has memory of its own; copies "
              "that infer their direction from the address (cudaMemcpyDefault) may go the wrong way",
              (unsigned long long)base, (unsigned long long)a.size);
  }
}

std::map<uint64_t, Allocation>::iterator State::eraseLocked(std::map<uint64_t, Allocation>::iterator it) {
  if (it->second.graph) --graph_allocations;
  if (it->second.managed) return allocations_.erase(it);
  if (it->second.device) address_space_.release(it->first, it->second.size);
  else --host_allocations;
  return allocations_.erase(it);
}

void State::addAllocation(uint64_t base, uint64_t size, bool device, unsigned flags, int owner) {
  std::lock_guard lock(mu);
  insertLocked(base, Allocation{size, device, flags}, owner);
}

void State::addPoolAllocation(uint64_t base, uint64_t size, uint64_t pool, int owner) {
  std::lock_guard lock(mu);
  insertLocked(base, Allocation{size, true, 0, false, pool}, owner);
}

void State::addGraphAllocation(uint64_t base, uint64_t size, int owner) {
  Allocation a{size, true};
  a.graph = true;
  std::lock_guard lock(mu);
  insertLocked(base, a, owner);
}

void State::addSharedHost(uint64_t base, uint64_t size, unsigned flags, int owner) {
  Allocation a{size, false, flags};
  a.shared = true;
  std::lock_guard lock(mu);
  insertLocked(base, a, owner);
}

int State::sharedHostOwner(uint64_t ptr, uint64_t size) {
  std::lock_guard lock(mu);
  uint64_t base;
  const Allocation* a = lookupLocked(ptr, base);
  if (!a || !a->shared || size > a->size - (ptr - base)) return -1;
  return a->owner;
}

void State::addManaged(uint64_t base, uint64_t size) {
  std::lock_guard lock(mu);
  insertLocked(base, Allocation{size, true, 0, false, 0, true});
}

void State::addGlobal(uint64_t base, uint64_t size, int owner) {
  std::lock_guard lock(mu);
  insertLocked(base, Allocation{size, true, 0, true}, owner);
}

bool State::setSyncMemops(uint64_t ptr, bool on) {
  std::lock_guard lock(mu);
  uint64_t base;
  const Allocation* a = lookupLocked(ptr, base);
  if (!a || !a->device || a->managed) return false;
  allocations_.at(base).sync_memops = on;
  return true;
}

bool State::takeDeviceAllocation(uint64_t base, bool* graph) {
  std::lock_guard lock(mu);
  auto it = allocations_.find(base);
  if (it == allocations_.end() || !it->second.device || it->second.global) return false;
  if (graph) *graph = it->second.graph;
  if (!it->second.graph) eraseLocked(it);
  return true;
}

void State::forgetGraphAllocations(const std::vector<uint64_t>& gone, int owner) {
  std::lock_guard lock(mu);
  for (uint64_t base : gone) {
    auto it = allocations_.find(base);
    if (it != allocations_.end() && it->second.graph && it->second.owner == owner) eraseLocked(it);
  }
}

void State::removeAllocation(uint64_t base) {
  std::lock_guard lock(mu);
  auto it = allocations_.find(base);
  if (it != allocations_.end()) eraseLocked(it);
}

const Allocation* State::lookupLocked(uint64_t ptr, uint64_t& base) const {
  auto it = allocations_.upper_bound(ptr);
  if (it == allocations_.begin()) return nullptr;
  --it;
  if (ptr - it->first >= std::max<uint64_t>(it->second.size, 1)) return nullptr;
  base = it->first;
  return &it->second;
}

// Whether `ptr` lies in device memory, also where host memory of this process lies at the same address
// (a worker's driver places device memory in its own address space, which may cover the program's): the
// nearest allocations below `ptr` are looked at, device memory that starts further down is not found.
bool State::inDeviceMemoryLocked(uint64_t ptr) const {
  auto it = allocations_.upper_bound(ptr);
  for (int looked = 0; it != allocations_.begin() && looked < 64; ++looked) {
    --it;
    if (it->second.device && ptr - it->first < std::max<uint64_t>(it->second.size, 1)) return true;
  }
  return false;
}

bool State::clashesAcrossDevices(uint64_t base, uint64_t size, int owner) {
  std::lock_guard lock(mu);
  return clashesLocked(base, size, owner);
}

bool State::clashesLocked(uint64_t base, uint64_t size, int owner) const {
  if (conns_.size() < 2) return false;
  auto it = allocations_.lower_bound(base + size);  // the first that starts past the range
  while (it != allocations_.begin()) {
    --it;
    if (it->first + std::max<uint64_t>(it->second.size, 1) <= base) break;  // ends before the range
    if (it->second.device && it->second.owner != owner) return true;
  }
  for (auto r = reservations_.lower_bound(base + size); r != reservations_.begin();) {
    --r;
    if (r->first + r->second.size <= base) break;  // (reservations never overlap one another)
    if (std::find(r->second.holders.begin(), r->second.holders.end(), owner) == r->second.holders.end()) return true;
  }
  return false;
}

void State::addReservation(uint64_t base, uint64_t size, int holder) {
  std::lock_guard lock(mu);
  reservations_[base] = Reservation{size, {holder}};
}

bool State::reservationAt(uint64_t ptr, uint64_t& base, uint64_t& size, std::vector<int>& holders) {
  std::lock_guard lock(mu);
  auto it = reservations_.upper_bound(ptr);
  if (it == reservations_.begin() || ptr - std::prev(it)->first >= std::prev(it)->second.size) return false;
  --it;
  base = it->first;
  size = it->second.size;
  holders = it->second.holders;
  return true;
}

void State::addReservationHolder(uint64_t base, int holder) {
  std::lock_guard lock(mu);
  if (auto it = reservations_.find(base); it != reservations_.end()) it->second.holders.push_back(holder);
}

std::vector<int> State::takeReservation(uint64_t base) {
  std::lock_guard lock(mu);
  auto it = reservations_.find(base);
  if (it == reservations_.end()) return {};
  std::vector<int> holders = std::move(it->second.holders);
  reservations_.erase(it);
  return holders;
}

bool State::findAllocation(uint64_t ptr, uint64_t& base, Allocation& a) {
  std::lock_guard lock(mu);
  const Allocation* found = lookupLocked(ptr, base);
  if (found) a = *found;
  return found != nullptr;
}

void State::setFunctionName(uint64_t f, const std::string& name) {
  std::lock_guard lock(mu);
  // A handle the driver reused gets its new name; names handed out earlier stay valid (kept for good).
  auto it = function_names_.find(f);
  if (it != function_names_.end() && *it->second == name) return;
  function_names_[f] = &names_.emplace_back(name);
}

const char* State::functionName(uint64_t f) {
  std::lock_guard lock(mu);
  auto it = function_names_.find(f);
  return it == function_names_.end() ? nullptr : it->second->c_str();
}

uint64_t State::firstHostPointer(const uint8_t* words, size_t count, size_t& index, int reaching) {
  std::lock_guard lock(mu);
  for (size_t i = 0; i < count; ++i) {
    uint64_t v, base;
    std::memcpy(&v, words + 8 * i, 8);
    if (v == 0) continue;
    if (const Allocation* a = lookupLocked(v, base);
        a && !a->device && !(a->shared && a->owner == reaching) && !inDeviceMemoryLocked(v)) {
      index = i;
      return v;
    }
  }
  return 0;
}

CUresult State::paramLayout(uint64_t f, ParamLayout& layout) {
  {
    std::lock_guard lock(mu);
    if (auto it = layouts_.find(f); it != layouts_.end()) {
      layout = it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult err;
  Connection* c = readyForHandle(f, err);  // (a kernel's layout is the same on every device)
  if (!c) return err;
  std::tuple<std::vector<uint32_t>> out;
  int st = c->call<proto::calls::FuncGetParamLayout>(out, f);
  if (st != CUDA_SUCCESS && st != CUDA_ERROR_NOT_SUPPORTED) return static_cast<CUresult>(st);
  // NOT_SUPPORTED: the sim backend does not know this kernel's parameters; launch it without them.
  auto made = std::make_shared<const std::vector<uint32_t>>(std::move(std::get<0>(out)));
  std::lock_guard lock(mu);
  layout = layouts_.try_emplace(f, std::move(made)).first->second;  // (another thread's, where it came first)
  return CUDA_SUCCESS;
}

CUresult State::functionAttribute(uint64_t f, int attr, int& value, std::optional<CUdevice> device) {
  const int connection = device ? connectionOf(*device) : currentConnection();
  {
    std::lock_guard lock(mu);
    if (auto it = func_attrs_.find({f, attr, connection}); it != func_attrs_.end()) {
      value = it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult err;
  Connection* c = readyOn(connection, err);
  if (!c) return err;
  std::tuple<int32_t> out;
  int st = c->call<proto::calls::FuncGetAttribute>(out, f, static_cast<int32_t>(attr));
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  value = std::get<0>(out);
  std::lock_guard lock(mu);
  func_attrs_[{f, attr, connection}] = value;
  return CUDA_SUCCESS;
}

void State::forgetFunctionAttribute(uint64_t f, int attr) {
  std::lock_guard lock(mu);
  // (keys sort by function, then attribute: a function's attribute on every connection is one run of them;
  // programs set attributes before each launch, so no walk over the whole cache)
  func_attrs_.erase(func_attrs_.lower_bound({f, attr, std::numeric_limits<int>::min()}),
                    func_attrs_.upper_bound({f, attr, std::numeric_limits<int>::max()}));
}

bool State::occupancy(const OccupancyKey& k, int& blocks) {
  std::lock_guard lock(mu);
  auto it = occupancy_.find(k);
  if (it == occupancy_.end()) return false;
  blocks = it->second;
  return true;
}

void State::keepOccupancy(const OccupancyKey& k, int blocks) {
  std::lock_guard lock(mu);
  occupancy_[k] = blocks;
}

void State::forgetOccupancy(uint64_t f) {
  std::lock_guard lock(mu);
  if (f == 0) occupancy_.clear();
  else std::erase_if(occupancy_, [f](const auto& e) { return std::get<0>(e.first) == f; });
}

void State::addStream(uint64_t s, StreamInfo info) {
  std::lock_guard lock(mu);
  streams_[s] = info;
}
void State::removeStream(uint64_t s) {
  std::lock_guard lock(mu);
  streams_.erase(s);
}
bool State::streamInfo(uint64_t s, StreamInfo& info) {
  std::lock_guard lock(mu);
  auto it = streams_.find(s);
  if (it == streams_.end()) return false;
  info = it->second;
  return true;
}

}  // namespace gpool::client
