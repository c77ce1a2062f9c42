// Modules, libraries, functions and kernels. An image is named by its SHA-256 first; only when the
// worker's host does not hold it yet is it sent whole, and the worker's driver loads it.
#include <openssl/evp.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>

#include "cross_device.h"
#include "gpool/protocol/module_image.h"
#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;
using gpool::proto::Blob;

namespace {

constexpr uint32_t kModule = 0, kLibrary = 1;

// Loads one image on the worker: by its SHA-256 when the worker host keeps a module cache, else (or when
// the host does not hold it yet) by sending the bytes.
CUresult send(gpool::client::Connection* conn, const void* image, uint64_t size, uint32_t kind, uint64_t& handle) {
  std::tuple<uint64_t> out;
  int st = CUDA_ERROR_NOT_FOUND;
  if (conn->hello().features & gpool::proto::kFeatureModuleCache) {
    std::string hash(32, '\0');
    unsigned int n = 0;
    EVP_Digest(image, size, reinterpret_cast<unsigned char*>(hash.data()), &n, EVP_sha256(), nullptr);
    st = conn->call<calls::ModuleLoadCached>(out, hash, kind);
    if (st == CUDA_SUCCESS) std::get<0>(out) = conn->marked(std::get<0>(out));  // a plain number on the wire
  }
  if (st == CUDA_ERROR_NOT_FOUND) {
    calls::ModuleLoad::out::tuple loaded;
    st = conn->call<calls::ModuleLoad>(loaded, Blob{image, size}, kind);
    std::get<0>(out) = std::get<0>(loaded).handle;
    static std::atomic<uint64_t> sent_images{0}, sent_bytes{0};
    uint64_t images = ++sent_images, bytes = sent_bytes += size;
    GPOOL_LOG(Level::kDebug, "module image of %llu bytes sent; %llu images, %llu bytes sent so far",
              (unsigned long long)size, (unsigned long long)images, (unsigned long long)bytes);
  }
  handle = std::get<0>(out);
  return static_cast<CUresult>(st);
}

// The connection a module or library call goes to: a module's own device; for a library, the current
// one (a library is every device's: its kernels and globals there are the current context's).
gpool::client::Connection* connFor(uint64_t handle, uint32_t kind, CUresult& err) {
  State& s = State::get();
  return kind == kLibrary ? s.ready(err) : s.readyForHandle(handle, err);
}

CUresult load(const void* image, uint32_t kind, uint64_t& handle) {
  if (!image) return CUDA_ERROR_INVALID_VALUE;
  // The runtime hands over its registration wrapper as often as the bare fat binary.
  if (const void* fatbin = gpool::proto::fatbinFromWrapper(image)) image = fatbin;
  uint64_t size = gpool::proto::moduleImageSize(image);
  if (size == 0) {
    uint32_t magic;
    std::memcpy(&magic, image, 4);
    GPOOL_LOG(Level::kWarn, "unrecognised module image (magic %08x: not a fat binary, ELF or PTX)", magic);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  GPOOL_CONN(conn);
  CUresult r = gpool::client::loadImageOn(conn, image, size, kind, handle);
  // A library is loaded on the lease's other devices when one of its kernels is first used there.
  if (r == CUDA_SUCCESS && kind == kLibrary) crossDevice().noteLibrary(handle, image, size);
  return r;
}

CUresult loadFile(const char* path, uint32_t kind, uint64_t& handle) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream f(path, std::ios::binary);
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  bytes.push_back(0);  // PTX text is read up to its NUL
  return load(bytes.data(), kind, handle);
}

CUresult getFunction(uint64_t handle, uint32_t kind, const char* name, uint64_t& out) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  CUresult err = CUDA_SUCCESS;
  gpool::client::Connection* conn = connFor(handle, kind, err);
  if (!conn) return err;
  calls::ModuleGetFunction::out::tuple r;
  int st = conn->call<calls::ModuleGetFunction>(r, gpool::proto::ModuleRef{handle, kind}, std::string(name));
  out = std::get<0>(r);
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  State::get().setFunctionName(out, name);
  if (kind == kLibrary) crossDevice().noteKernel(out, handle, name);
  return CUDA_SUCCESS;
}

// The kernels of a module (kind 0: CUfunction handles) or library (kind 1: CUkernel handles), named.
CUresult functions(uint64_t handle, uint32_t kind, std::vector<uint64_t>& out) {
  CUresult err = CUDA_SUCCESS;
  gpool::client::Connection* conn = connFor(handle, kind, err);
  if (!conn) return err;
  calls::ModuleFunctions::out::tuple r;
  int st = conn->call<calls::ModuleFunctions>(r, gpool::proto::ModuleRef{handle, kind});
  if (st != CUDA_SUCCESS) return static_cast<CUresult>(st);
  const std::string names(std::get<0>(r).begin(), std::get<0>(r).end());
  out = std::get<1>(r).v;
  size_t at = 0;
  for (uint64_t f : out) {
    size_t end = names.find('\0', at);
    if (end == std::string::npos) return CUDA_ERROR_UNKNOWN;  // the worker sent fewer names than handles
    State::get().setFunctionName(f, names.substr(at, end - at));
    if (kind == kLibrary) crossDevice().noteKernel(f, handle, names.substr(at, end - at));
    at = end + 1;
  }
  return CUDA_SUCCESS;
}

template <typename H>
CUresult enumerate(H* items, unsigned n, uint64_t handle, uint32_t kind) {
  if (!items && n) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint64_t> all;
  if (CUresult r = functions(handle, kind, all)) return r;
  if (n > all.size()) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; ++i) items[i] = reinterpret_cast<H>(all[i]);
  return CUDA_SUCCESS;
}

CUresult count(unsigned* n, uint64_t handle, uint32_t kind) {
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint64_t> all;
  if (CUresult r = functions(handle, kind, all)) return r;
  *n = static_cast<unsigned>(all.size());
  return CUDA_SUCCESS;
}

CUresult name(const char** out, uint64_t f) {
  if (!out || !f) return CUDA_ERROR_INVALID_VALUE;
  *out = State::get().functionName(f);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult getGlobal(CUdeviceptr* dptr, size_t* bytes, uint64_t handle, uint32_t kind, const char* name) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  CUresult err = CUDA_SUCCESS;
  gpool::client::Connection* conn = connFor(handle, kind, err);
  if (!conn) return err;
  calls::ModuleGetGlobal::out::tuple r;
  int st = conn->call<calls::ModuleGetGlobal>(r, gpool::proto::ModuleRef{handle, kind}, std::string(name));
  if (st) return static_cast<CUresult>(st);
  const gpool::proto::ModuleGlobal& g = std::get<0>(r);
  if (dptr) *dptr = g.ptr;
  if (bytes) *bytes = g.bytes;
  if (!isManaged(g.ptr)) State::get().addGlobal(g.ptr, g.bytes, conn->index());  // so cuMemcpy knows its direction and device
  return CUDA_SUCCESS;
}

template <typename H>
H as(uint64_t v) { return reinterpret_cast<H>(v); }

// Runs `make(uint64_t& handle)` and stores the handle as the caller's handle type on success.
template <typename H, typename F>
CUresult produce(H* out, F&& make) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  uint64_t h = 0;
  CUresult r = make(h);
  if (r == CUDA_SUCCESS) *out = as<H>(h);
  return r;
}
template <typename H>
uint64_t raw(H h) { return reinterpret_cast<uint64_t>(h); }

}  // namespace

namespace gpool::client {
// A fat binary carries a cubin per architecture (cuBLAS: six); the device loads only its own, so only
// that one travels. Should the worker's driver refuse the trimmed image, the whole one is sent.
CUresult loadImageOn(Connection* conn, const void* image, uint64_t size, uint32_t kind, uint64_t& handle) {
  const auto& attrs = conn->hello().devices[0].attributes;
  auto attr = [&](size_t a) { return a < attrs.size() ? static_cast<uint32_t>(attrs[a]) : 0u; };
  uint32_t arch = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 + attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  std::vector<uint8_t> trimmed = gpool::proto::fatbinForArch(image, size, arch);
  if (!trimmed.empty()) {
    CUresult r = send(conn, trimmed.data(), trimmed.size(), kind, handle);
    if (r != CUDA_ERROR_INVALID_IMAGE && r != CUDA_ERROR_NO_BINARY_FOR_GPU) return r;
    static int once;
    if (!__atomic_exchange_n(&once, 1, __ATOMIC_RELAXED))
      GPOOL_LOG(Level::kInfo, "the worker refused a fat binary trimmed to sm_%u (CUresult %d); sending whole images", arch, r);
  }
  return send(conn, image, size, kind, handle);
}

// Used by the runtime's private table (export_tables.cpp).
CUresult loadModuleImage(CUmodule* out, const void* image) {
  uint64_t h = 0;
  CUresult r = load(image, kModule, h);
  if (r == CUDA_SUCCESS) *out = as<CUmodule>(h);
  return r;
}
}  // namespace gpool::client

GPOOL_EXPORT CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  GPOOL_TRY
  if (!m) return CUDA_ERROR_INVALID_VALUE;
  return loadModuleImage(m, image);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuModuleLoadDataEx(CUmodule* m, const void* image, unsigned int n, CUjit_option* options, void** values) {
  // JIT options tune compilation on the worker's driver, whose defaults apply; the caller's log buffers
  // are left holding empty logs rather than whatever they held.
  gpool::client::clearJitLogs(n, options, values);
  return cuModuleLoadData(m, image);
}
GPOOL_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* m, const void* fatbin) { return cuModuleLoadData(m, fatbin); }
GPOOL_EXPORT CUresult cuModuleLoad(CUmodule* m, const char* path) {
  GPOOL_TRY return produce(m, [&](uint64_t& h) { return loadFile(path, kModule, h); }); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuModuleUnload(CUmodule m) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, raw(m));
  int st = conn->call<calls::ModuleUnload>(gpool::proto::ModuleRef{raw(m), kModule});
  if (st == CUDA_SUCCESS) State::get().forgetFunctions();  // their handles may be reused
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  GPOOL_TRY return produce(f, [&](uint64_t& h) { return getFunction(raw(m), kModule, name, h); }); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule m, const char* name) {
  GPOOL_TRY return getGlobal(dptr, bytes, raw(m), kModule, name); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  GPOOL_TRY
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_EAGER_LOADING;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuLibraryLoadData(CUlibrary* lib, const void* code, CUjit_option*, void**, unsigned int,
                                        CUlibraryOption*, void**, unsigned int) {
  GPOOL_TRY return produce(lib, [&](uint64_t& h) { return load(code, kLibrary, h); }); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary* lib, const char* path, CUjit_option*, void**, unsigned int,
                                            CUlibraryOption*, void**, unsigned int) {
  GPOOL_TRY return produce(lib, [&](uint64_t& h) { return loadFile(path, kLibrary, h); }); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLibraryUnload(CUlibrary lib) {
  GPOOL_TRY
  GPOOL_CONN_OF_HANDLE(conn, raw(lib));
  for (auto [connection, copy] : crossDevice().forgetLibrary(raw(lib))) {
    gpool::client::AsideScope aside;  // gpool's copies of the library on the lease's other devices
    CUresult err = CUDA_SUCCESS;
    if (auto* there = State::get().readyOn(connection, err)) there->call<calls::ModuleUnload>(gpool::proto::ModuleRef{copy, kLibrary});
  }
  int st = conn->call<calls::ModuleUnload>(gpool::proto::ModuleRef{raw(lib), kLibrary});
  if (st == CUDA_SUCCESS) State::get().forgetFunctions();  // their handles may be reused
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLibraryGetKernel(CUkernel* k, CUlibrary lib, const char* name) {
  GPOOL_TRY return produce(k, [&](uint64_t& h) { return getFunction(raw(lib), kLibrary, name, h); }); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary lib, const char* name) {
  GPOOL_TRY return getGlobal(dptr, bytes, raw(lib), kLibrary, name); GPOOL_CATCH
}
// A unified function is called through one pointer from the host and the device alike, where the device
// shares the host's function pointers (CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS). The GPU is in
// another process, often on another machine: gpool's devices report that attribute 0, and a library has
// no unified function to give, as CUDA answers on such a system. The library is checked all the same.
GPOOL_EXPORT CUresult cuLibraryGetUnifiedFunction(void** fptr, CUlibrary lib, const char* symbol) {
  GPOOL_TRY
  if (!fptr || !symbol) return CUDA_ERROR_INVALID_VALUE;
  unsigned kernels = 0;
  if (CUresult r = count(&kernels, raw(lib), kLibrary)) return r;
  return CUDA_ERROR_NOT_FOUND;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuKernelGetFunction(CUfunction* f, CUkernel k) {
  GPOOL_TRY
  if (!f) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN(conn);
  calls::KernelGetFunction::out::tuple r;
  int st = conn->call<calls::KernelGetFunction>(r, raw(k));
  uint64_t fn = std::get<0>(r);
  *f = as<CUfunction>(fn);
  if (const char* n = State::get().functionName(raw(k)); n && st == CUDA_SUCCESS) State::get().setFunctionName(fn, n);
  if (st == CUDA_SUCCESS) crossDevice().noteAlias(fn, raw(k));
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuModuleGetFunctionCount(unsigned int* n, CUmodule m) {
  GPOOL_TRY return count(n, raw(m), kModule); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuModuleEnumerateFunctions(CUfunction* fns, unsigned int n, CUmodule m) {
  GPOOL_TRY return enumerate(fns, n, raw(m), kModule); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLibraryGetKernelCount(unsigned int* n, CUlibrary lib) {
  GPOOL_TRY return count(n, raw(lib), kLibrary); GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int n, CUlibrary lib) {
  GPOOL_TRY return enumerate(kernels, n, raw(lib), kLibrary); GPOOL_CATCH
}
// The module a function came from, or the library a kernel did, as the worker's table knows it. A
// function got from a library's kernel has no module of its own here (CUDA_ERROR_NOT_SUPPORTED).
namespace {
CUresult ownerOf(uint64_t launchable, uint32_t want, uint64_t& owner) {
  GPOOL_CONN_OF_HANDLE(conn, launchable);
  calls::LaunchableOwner::out::tuple r;
  if (int st = conn->call<calls::LaunchableOwner>(r, launchable)) return static_cast<CUresult>(st);
  if (std::get<0>(r).kind != want) return want == 0 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_HANDLE;
  owner = std::get<0>(r).handle;
  return CUDA_SUCCESS;
}
template <typename H>
CUresult ownerOut(H* out, uint64_t launchable, uint32_t want) {
  if (!out || !launchable) return CUDA_ERROR_INVALID_VALUE;
  uint64_t owner = 0;
  if (CUresult r = ownerOf(launchable, want, owner)) return r;
  *out = as<H>(owner);
  return CUDA_SUCCESS;
}
}  // namespace
// A library's module in the worker's context; the library owns it (unloading the library ends it).
GPOOL_EXPORT CUresult cuLibraryGetModule(CUmodule* out, CUlibrary lib) {
  GPOOL_TRY
  if (!out || !lib) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, raw(lib));
  calls::LibraryGetModule::out::tuple r;
  int st = conn->call<calls::LibraryGetModule>(r, gpool::proto::ModuleRef{raw(lib), kLibrary});
  *out = st == CUDA_SUCCESS ? as<CUmodule>(std::get<0>(r).handle) : nullptr;
  return static_cast<CUresult>(st);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuFuncGetModule(CUmodule* out, CUfunction f) { GPOOL_TRY return ownerOut(out, raw(f), 0); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuKernelGetLibrary(CUlibrary* out, CUkernel k) { GPOOL_TRY return ownerOut(out, raw(k), 1); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuFuncGetName(const char** out, CUfunction f) { GPOOL_TRY return name(out, raw(f)); GPOOL_CATCH }
GPOOL_EXPORT CUresult cuKernelGetName(const char** out, CUkernel k) { GPOOL_TRY return name(out, raw(k)); GPOOL_CATCH }

namespace gpool::client {
// Private table 6e163fbe slot 7 (cuFFT calls it on the modules it loads): calls `visit(opaque, function,
// owner)` for each kernel of `module` and returns how many there were. The third argument's meaning is
// not known; the module handle is passed.
uint64_t visitModuleFunctions(CUcontext, CUmodule module, void (*visit)(void*, void*, uint64_t), void* opaque) {
  std::vector<uint64_t> all;
  if (!module || !visit || functions(raw(module), kModule, all) != CUDA_SUCCESS) return 0;
  for (uint64_t f : all) visit(opaque, reinterpret_cast<void*>(f), raw(module));
  return all.size();
}
}  // namespace gpool::client

// Function and kernel attributes: cached after the first query.
namespace {
// The device a CUfunction's attributes are its own on: the function's (it belongs to a context, and is
// asked whichever is current); none for a library's kernel passed as a function, which CUDA takes for its
// copy on the current device.
std::optional<CUdevice> deviceOfFunction(CUfunction f) {
  if (crossDevice().isKernel(raw(f))) return std::nullopt;
  return State::get().deviceOfHandle(raw(f));
}
Connection* connectionOfFunction(CUfunction f, CUresult& err) {
  std::optional<CUdevice> d = deviceOfFunction(f);
  return d ? State::get().readyForDevice(*d, err) : State::get().readyInContext(err);
}
// Forgets the occupancy answers for a function or kernel, and for every other handle of the same library
// kernel (its copies on other devices, the functions got from them), which a setting of it may change.
void forgetOccupancy(uint64_t f) {
  State::get().forgetOccupancy(f);
  for (uint64_t same : crossDevice().family(f)) State::get().forgetOccupancy(same);
}
// The same for what one of its attributes was, and the occupancy that follows from it.
void forgetAttribute(uint64_t f, int attr) {
  State::get().forgetFunctionAttribute(f, attr);
  for (uint64_t same : crossDevice().family(f)) State::get().forgetFunctionAttribute(same, attr);
  forgetOccupancy(f);
}
}  // namespace
GPOOL_EXPORT CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attr, CUfunction f) {
  GPOOL_TRY
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  return State::get().functionAttribute(raw(f), attr, *value, deviceOfFunction(f));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuKernelGetAttribute(int* value, CUfunction_attribute attr, CUkernel k, CUdevice d) {
  GPOOL_TRY
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  return State::get().functionAttribute(raw(k), attr, *value, d);
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int value) {
  GPOOL_TRY
  CUresult err = CUDA_SUCCESS;
  Connection* conn = connectionOfFunction(f, err);
  if (!conn) return err;
  forgetAttribute(raw(f), attr);
  return static_cast<CUresult>(conn->call<calls::FuncSetAttribute>(raw(f), static_cast<int32_t>(attr), int32_t{value}));
  GPOOL_CATCH
}
// A library's kernel on the device named (its copy there: cross_device.h), which need not be current.
GPOOL_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attr, int value, CUkernel k, CUdevice d) {
  GPOOL_TRY
  GPOOL_CONN_OF_DEVICE(conn, d);
  forgetAttribute(raw(k), attr);  // (the functions got from the kernel too: its family)
  return static_cast<CUresult>(conn->call<calls::FuncSetAttribute>(raw(k), static_cast<int32_t>(attr), int32_t{value}));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config) {
  GPOOL_TRY
  CUresult err = CUDA_SUCCESS;
  Connection* conn = connectionOfFunction(f, err);
  if (!conn) return err;
  forgetOccupancy(raw(f));
  return static_cast<CUresult>(conn->post<calls::FuncSetCacheConfig>(raw(f), static_cast<uint32_t>(config)));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache config, CUdevice d) {
  GPOOL_TRY
  GPOOL_CONN_OF_DEVICE(conn, d);
  forgetOccupancy(raw(k));
  return static_cast<CUresult>(conn->post<calls::FuncSetCacheConfig>(raw(k), static_cast<uint32_t>(config)));
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  GPOOL_TRY
  State::ParamLayout layout;
  if (CUresult r = State::get().paramLayout(raw(f), layout)) return r;
  if (2 * index + 1 >= layout->size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = (*layout)[2 * index];
  if (size) *size = (*layout)[2 * index + 1];
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuKernelGetParamInfo(CUkernel k, size_t index, size_t* offset, size_t* size) {
  return cuFuncGetParamInfo(reinterpret_cast<CUfunction>(k), index, offset, size);
}

// Lazy loading: the worker's driver loads a function when it is first used; to the program every
// function is loaded.
GPOOL_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction f) {
  GPOOL_TRY
  if (!state || !f) return CUDA_ERROR_INVALID_VALUE;
  *state = CU_FUNCTION_LOADING_STATE_LOADED;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}
GPOOL_EXPORT CUresult cuFuncLoad(CUfunction f) { return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
// Shared-memory bank configuration has had no effect since Volta; the driver accepts and ignores it too.
GPOOL_EXPORT CUresult cuFuncSetSharedMemConfig(CUfunction f, CUsharedconfig) { return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
GPOOL_EXPORT CUresult cuCtxSetSharedMemConfig(CUsharedconfig) { return CUDA_SUCCESS; }
GPOOL_EXPORT CUresult cuCtxGetSharedMemConfig(CUsharedconfig* config) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  return CUDA_SUCCESS;
}
