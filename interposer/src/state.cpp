// Client state: connecting at cuInit and the local caches (see state.h).
#include "state.h"

#include <cstdlib>

namespace gpool::client {

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
    const char* token = std::getenv("GPOOL_TOKEN");
    uint32_t device = dev ? static_cast<uint32_t>(std::strtoul(dev, nullptr, 10)) : 0;
    try {
      conn_ = std::make_unique<Connection>(proto::connectTcp(address), address, device, token ? token : "");
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
  const auto* dev = device(d);
  if (!dev || attr < 0 || static_cast<size_t>(attr) >= dev->attributes.size()) return 0;
  return dev->attributes[static_cast<size_t>(attr)];
}

bool State::isContext(CUcontext c) const {
  for (const auto& p : primary_)
    if (reinterpret_cast<const Context*>(c) == &p) return true;
  return false;
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

void State::addAllocation(uint64_t base, uint64_t size, bool device, unsigned flags) {
  std::lock_guard lock(mu);
  auto [it, fresh] = allocations_.insert_or_assign(base, Allocation{size, device, flags});
  (void)it;
  if (fresh && !device) ++host_allocations;
}

void State::removeAllocation(uint64_t base) {
  std::lock_guard lock(mu);
  auto it = allocations_.find(base);
  if (it == allocations_.end()) return;
  if (!it->second.device) --host_allocations;
  allocations_.erase(it);
}

bool State::findAllocation(uint64_t ptr, uint64_t& base, Allocation& a) {
  std::lock_guard lock(mu);
  auto it = allocations_.upper_bound(ptr);
  if (it == allocations_.begin()) return false;
  --it;
  if (ptr - it->first >= std::max<uint64_t>(it->second.size, 1)) return false;
  base = it->first;
  a = it->second;
  return true;
}

void State::setFunctionName(uint64_t f, const std::string& name) {
  std::lock_guard lock(mu);
  function_names_.try_emplace(f, name);
}

const char* State::functionName(uint64_t f) {
  std::lock_guard lock(mu);
  auto it = function_names_.find(f);
  return it == function_names_.end() ? nullptr : it->second.c_str();
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
