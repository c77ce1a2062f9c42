// Client state: connecting at cuInit and the local caches (see state.h).
#include "state.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <cstring>

extern char** environ;

namespace gpool::client {
namespace {

// A program started with only GPOOL_ALLOCATOR set gets its lease here, from a `gpool lease` helper: it
// asks the allocator (showing queue progress on our stderr), prints the lease, and heartbeats it until
// the pipe we hold closes — when this process ends, however it ends — then releases it.
struct AllocatorLease {
  std::string server, token;
  uint32_t device = 0;
};

std::string gpoolBinary() {
  if (const char* b = std::getenv("GPOOL_BIN"); b && *b) return b;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&gpoolBinary), &info) && info.dli_fname) {
    std::filesystem::path lib = std::filesystem::path(info.dli_fname).parent_path();  // .../lib/gpool
    for (auto candidate : {lib / ".." / ".." / "bin" / "gpool", lib / ".." / ".." / "tools" / "gpool" / "gpool"}) {
      std::error_code ec;
      if (std::filesystem::exists(candidate, ec)) return candidate.lexically_normal().string();
    }
  }
  return "gpool";  // on PATH
}

std::optional<AllocatorLease> leaseFromAllocator(std::string& why) {
  std::vector<std::string> args{gpoolBinary(), "lease"};
  for (auto [env, flag] : {std::pair{"GPOOL_GPUS", "-n"}, std::pair{"GPOOL_FRACTION", "-p"}, std::pair{"GPOOL_MEMORY", "-m"},
                           std::pair{"GPOOL_WAIT", "--wait"}, std::pair{"GPOOL_POOL", "--pool"},
                           std::pair{"GPOOL_PRIORITY", "--priority"}})
    if (const char* v = std::getenv(env); v && *v) args.insert(args.end(), {flag, v});
  int to_helper[2], from_helper[2];
  if (::pipe2(to_helper, O_CLOEXEC) != 0 || ::pipe2(from_helper, O_CLOEXEC) != 0) {
    why = "cannot create pipes for gpool lease";
    return std::nullopt;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_helper[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_helper[1], 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // its own group: a Ctrl-C meant for us is not for it
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(to_helper[0]);
  ::close(from_helper[1]);
  if (rc != 0) {
    why = "cannot run " + args[0] + " (" + std::strerror(rc) + "); set GPOOL_BIN to gpool's path";
    ::close(to_helper[1]);
    ::close(from_helper[0]);
    return std::nullopt;
  }
  // to_helper[1] stays open (close-on-exec) for the life of this process: its closing ends the lease.
  std::string line;
  char c;
  while (::read(from_helper[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(from_helper[0]);
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("GPOOL_SERVER") || !j.contains("GPOOL_TOKEN")) {
    why = "gpool lease did not grant a lease (its message is above)";
    ::close(to_helper[1]);
    return std::nullopt;
  }
  AllocatorLease l;
  l.server = j["GPOOL_SERVER"].get<std::string>();
  l.token = j["GPOOL_TOKEN"].get<std::string>();
  l.device = static_cast<uint32_t>(std::stoul(j.value("GPOOL_DEVICE", std::string("0"))));
  GPOOL_LOG(Level::kInfo, "lease %s from %s: %s device %u", j.value("GPOOL_LEASE", std::string("?")).c_str(),
            std::getenv("GPOOL_ALLOCATOR"), l.server.c_str(), l.device);
  return l;
}

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

}  // namespace

thread_local std::vector<CUcontext> State::ctx_stack;

State& State::get() {
  static State* s = new State();  // never destroyed: the runtime calls in from atexit handlers
  return *s;
}

CUresult State::init() {
  std::call_once(once_, [this] {
    const char* env = std::getenv("GPOOL_SERVER");
    std::string address = env && *env ? env : "127.0.0.1:" + std::to_string(proto::kDefaultPort);
    const char* dev = std::getenv("GPOOL_DEVICE");
    const char* tok = std::getenv("GPOOL_TOKEN");
    std::string token = tok ? tok : "";
    uint32_t device = dev ? static_cast<uint32_t>(std::strtoul(dev, nullptr, 10)) : 0;
    const char* allocator = std::getenv("GPOOL_ALLOCATOR");
    if (allocator && *allocator && token.empty()) {
      std::string why;
      auto lease = leaseFromAllocator(why);
      if (!lease) {
        GPOOL_LOG(Level::kError, "no lease from %s: %s; CUDA reports no device", allocator, why.c_str());
        init_result_ = CUDA_ERROR_NO_DEVICE;
        return;
      }
      address = lease->server;
      device = lease->device;
      token = lease->token;
    }
    try {
      conn_ = std::make_unique<Connection>(proto::connectTcp(address), address, device, token, workerTimeout());
      primary_.resize(conn_->hello().devices.size());
      for (size_t i = 0; i < primary_.size(); ++i) {
        primary_[i].device = static_cast<int>(i);
        primary_[i].id = i + 1;
      }
      GPOOL_LOG(Level::kInfo, "connected to gpool-server at %s: %s (%s backend, driver %u)", address.c_str(),
                conn_->hello().devices[0].name.c_str(), conn_->hello().backend.c_str(), conn_->hello().driver_version);
      init_result_ = CUDA_SUCCESS;
    } catch (const std::exception& e) {
      GPOOL_LOG(Level::kError, "%s; CUDA reports no device (set GPOOL_SERVER=HOST:PORT to a running gpool-server)", e.what());
      init_result_ = CUDA_ERROR_NO_DEVICE;
    }
  });
  return init_result_;
}

Connection* State::ready(CUresult& err) {
  if (!conn_) {
    err = init_result_ == CUDA_SUCCESS ? CUDA_ERROR_NOT_INITIALIZED : init_result_;
    return nullptr;
  }
  if (int lost = conn_->lost()) {
    err = static_cast<CUresult>(lost);
    return nullptr;
  }
  return conn_.get();
}

const proto::DeviceInfo* State::device(CUdevice d) const {
  if (!conn_ || d < 0 || static_cast<size_t>(d) >= conn_->hello().devices.size()) return nullptr;
  return &conn_->hello().devices[static_cast<size_t>(d)];
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
  created_.remove_if([c](const Context& x) { return &x == c; });
  return true;
}

void State::forgetFunctions() {
  std::lock_guard lock(mu);
  layouts_.clear();
  func_attrs_.clear();
}

void State::forgetDeviceState() {
  std::lock_guard lock(mu);
  for (auto it = allocations_.begin(); it != allocations_.end();) it = it->second.device ? eraseLocked(it) : std::next(it);
  layouts_.clear();
  func_attrs_.clear();
  streams_.clear();
  current_pool = 0;
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
void State::insertLocked(uint64_t base, const Allocation& a) {
  auto it = allocations_.find(base);
  if (it != allocations_.end()) eraseLocked(it);
  allocations_.emplace(base, a);
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
  if (it->second.managed) return allocations_.erase(it);
  if (it->second.device) address_space_.release(it->first, it->second.size);
  else --host_allocations;
  return allocations_.erase(it);
}

void State::addAllocation(uint64_t base, uint64_t size, bool device, unsigned flags) {
  std::lock_guard lock(mu);
  insertLocked(base, Allocation{size, device, flags});
}

void State::addPoolAllocation(uint64_t base, uint64_t size, uint64_t pool) {
  std::lock_guard lock(mu);
  insertLocked(base, Allocation{size, true, 0, false, pool});
}

void State::addManaged(uint64_t base, uint64_t size) {
  std::lock_guard lock(mu);
  insertLocked(base, Allocation{size, true, 0, false, 0, true});
}

void State::addGlobal(uint64_t base, uint64_t size) {
  std::lock_guard lock(mu);
  insertLocked(base, Allocation{size, true, 0, true});
}

bool State::takeDeviceAllocation(uint64_t base) {
  std::lock_guard lock(mu);
  auto it = allocations_.find(base);
  if (it == allocations_.end() || !it->second.device || it->second.global) return false;
  eraseLocked(it);
  return true;
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

uint64_t State::firstHostPointer(const uint8_t* words, size_t count, size_t& index) {
  std::lock_guard lock(mu);
  for (size_t i = 0; i < count; ++i) {
    uint64_t v, base;
    std::memcpy(&v, words + 8 * i, 8);
    if (v == 0) continue;
    if (const Allocation* a = lookupLocked(v, base); a && !a->device) {
      index = i;
      return v;
    }
  }
  return 0;
}

CUresult State::paramLayout(uint64_t f, const std::vector<uint32_t>*& layout) {
  {
    std::lock_guard lock(mu);
    if (auto it = layouts_.find(f); it != layouts_.end()) {
      layout = &it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult err;
  Connection* c = ready(err);
  if (!c) return err;
  std::tuple<std::vector<uint32_t>> out;
  int st = c->call<proto::calls::FuncGetParamLayout>(out, f);
  if (st != CUDA_SUCCESS && st != CUDA_ERROR_NOT_SUPPORTED) return static_cast<CUresult>(st);
  // NOT_SUPPORTED: the sim backend does not know this kernel's parameters; launch it without them.
  std::lock_guard lock(mu);
  layout = &(layouts_[f] = std::move(std::get<0>(out)));
  return CUDA_SUCCESS;
}

CUresult State::functionAttribute(uint64_t f, int attr, int& value) {
  {
    std::lock_guard lock(mu);
    if (auto it = func_attrs_.find({f, attr}); it != func_attrs_.end()) {
      value = it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult err;
  Connection* c = ready(err);
  if (!c) return err;
  std::tuple<int32_t> out;
  int st = c->call<proto::calls::FuncGetAttribute>(out, f, static_cast<int32_t>(attr));
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  value = std::get<0>(out);
  std::lock_guard lock(mu);
  func_attrs_[{f, attr}] = value;
  return CUDA_SUCCESS;
}

void State::forgetFunctionAttribute(uint64_t f, int attr) {
  std::lock_guard lock(mu);
  func_attrs_.erase({f, attr});
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
