// Physical memory and memory pools shared between processes as file descriptors
// (cuMemExportToShareableHandle, cuMemPoolExportToShareableHandle and their imports, with
// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), as NVIDIA's memMapIPCDrv and streamOrderedAllocationIPC
// samples, NCCL and PyTorch's expandable segments share memory: the exporting process gets a real
// descriptor it may pass to another process over a Unix socket (SCM_RIGHTS) or by fork, as it would the
// driver's. The descriptor is a sealed memfd holding gpool's 64-byte handle, which the importing process's
// worker presents to the exporting one's to receive the driver's own descriptor
// (server/worker/shareable_handles.h). A pool's allocations travel as CUmemPoolPtrExportData holding a
// handle of the same kind. Both processes' leases must be on one GPU host, as for IPC. Imported memory
// belongs to the exporter's lease; an export lasts until the exporter releases the memory or destroys the pool.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <set>

#include "ipc_handles.h"
#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

// What a descriptor shares, as its first 8 bytes say.
using Magic = char[8];
constexpr Magic kPhysicalMagic = {'g', 'p', 'o', 'o', 'l', 'v', 'm', '1'};
constexpr Magic kPoolMagic = {'g', 'p', 'o', 'o', 'l', 'm', 'p', '1'};
constexpr size_t kHandleBytes = 64;
constexpr size_t kFileBytes = sizeof(Magic) + kHandleBytes;

std::mutex g_mu;
std::set<CUdeviceptr> g_imported_pointers;  // opened from another process's pool: freed by MemPoolFreeImported

CUresult refuseType(CUmemAllocationHandleType type, const char* call) {
  if (type == CU_MEM_HANDLE_TYPE_FABRIC) {
    GPOOL_LOG(Level::kWarn, "%s: fabric handles need an IMEX domain across GPU hosts; gpool shares memory between "
              "processes on one GPU host as POSIX file descriptors (returning CUDA_ERROR_NOT_SUPPORTED)", call);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_ERROR_INVALID_VALUE;  // Windows handles, or no type: not on Linux
}

// A sealed memfd holding the handle: the descriptor the program receives and passes on.
int handleFile(const Magic& magic, const std::vector<uint8_t>& handle) {
  int fd = memfd_create("gpool-shareable-handle", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  uint8_t file[kFileBytes];
  std::memcpy(file, magic, sizeof magic);
  std::memcpy(file + sizeof magic, handle.data(), kHandleBytes);
  if (pwrite(fd, file, sizeof file, 0) != static_cast<ssize_t>(sizeof file) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The handle in a descriptor handleFile made (here or in another process), or false for any other file.
bool readHandleFile(int fd, const Magic& magic, std::vector<uint8_t>& handle) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(kFileBytes)) return false;
  if (fcntl(fd, F_GET_SEALS) != (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) return false;
  uint8_t file[kFileBytes];
  if (pread(fd, file, sizeof file, 0) != static_cast<ssize_t>(sizeof file)) return false;
  if (std::memcmp(file, magic, sizeof magic) != 0) return false;
  handle.assign(file + sizeof magic, file + kFileBytes);
  return true;
}

// The handle in the descriptor an import names: POSIX descriptors only, and only one that `exporter`
// made through gpool.
CUresult handleOfDescriptor(void* os_handle, CUmemAllocationHandleType type, const Magic& magic, const char* call,
                            const char* exporter, std::vector<uint8_t>& handle) {
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return refuseType(type, call);
  if (readHandleFile(static_cast<int>(reinterpret_cast<uintptr_t>(os_handle)), magic, handle)) return CUDA_SUCCESS;
  GPOOL_LOG(Level::kWarn, "%s: the descriptor is not one %s made through gpool (returning CUDA_ERROR_INVALID_VALUE)", call, exporter);
  return CUDA_ERROR_INVALID_VALUE;
}

// The descriptor of what the worker filed under `handle`, into the caller's int.
CUresult giveDescriptor(void* out, const Magic& magic, const std::vector<uint8_t>& handle) {
  if (handle.size() != kHandleBytes) return CUDA_ERROR_UNKNOWN;
  int fd = handleFile(magic, handle);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(out) = fd;
  return CUDA_SUCCESS;
}

}  // namespace

GPOOL_EXPORT CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle h,
                                                   CUmemAllocationHandleType type, unsigned long long flags) {
  GPOOL_TRY
  if (!shareable || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return refuseType(type, "cuMemExportToShareableHandle");
  CUmemAllocationProp prop{};
  if (!physicalProperties(h, prop)) return CUDA_ERROR_INVALID_VALUE;
  if (!(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) return CUDA_ERROR_INVALID_VALUE;  // as CUDA
  GPOOL_CONN_OF_HANDLE(conn, uint64_t{h});
  calls::MemExportShareable::out::tuple out;
  if (int st = conn->call<calls::MemExportShareable>(out, uint64_t{h}, uint32_t{type})) return static_cast<CUresult>(st);
  return giveDescriptor(shareable, kPhysicalMagic, std::get<0>(out));
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* h, void* os_handle,
                                                     CUmemAllocationHandleType type) {
  GPOOL_TRY
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint8_t> handle;
  if (CUresult r = handleOfDescriptor(os_handle, type, kPhysicalMagic, "cuMemImportFromShareableHandle",
                                      "cuMemExportToShareableHandle", handle))
    return r;
  GPOOL_CONN(conn);
  calls::MemImportShareable::out::tuple out;
  auto r = static_cast<CUresult>(conn->call<calls::MemImportShareable>(out, handle, uint32_t{type}));
  if (r != CUDA_SUCCESS) return explainForeignHandle(r, "cuMemImportFromShareableHandle");
  const auto& imported = std::get<0>(out);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, State::get().currentDevice()};
  *h = imported.handle.v;
  addImportedPhysical(*h, prop, imported.bytes);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemPoolExportToShareableHandle(void* shareable, CUmemoryPool pool, CUmemAllocationHandleType type,
                                                       unsigned long long flags) {
  GPOOL_TRY
  if (!shareable || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return refuseType(type, "cuMemPoolExportToShareableHandle");
  GPOOL_CONN_OF_HANDLE(conn, reinterpret_cast<uint64_t>(pool));
  calls::MemPoolExportShareable::out::tuple out;
  if (int st = conn->call<calls::MemPoolExportShareable>(out, reinterpret_cast<uint64_t>(pool), uint32_t{type}))
    return static_cast<CUresult>(st);
  return giveDescriptor(shareable, kPoolMagic, std::get<0>(out));
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool* pool, void* os_handle, CUmemAllocationHandleType type,
                                                         unsigned long long flags) {
  GPOOL_TRY
  if (!pool || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint8_t> handle;
  if (CUresult r = handleOfDescriptor(os_handle, type, kPoolMagic, "cuMemPoolImportFromShareableHandle",
                                      "cuMemPoolExportToShareableHandle", handle))
    return r;
  GPOOL_CONN(conn);
  calls::MemPoolImportShareable::out::tuple out;
  auto r = static_cast<CUresult>(conn->call<calls::MemPoolImportShareable>(out, handle, uint32_t{type}));
  if (r != CUDA_SUCCESS) return explainForeignHandle(r, "cuMemPoolImportFromShareableHandle");
  *pool = reinterpret_cast<CUmemoryPool>(std::get<0>(out).v);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData* data, CUdeviceptr p) {
  GPOOL_TRY
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_POINTER(conn, p);
  calls::MemPoolExportPointer::out::tuple out;
  if (int st = conn->call<calls::MemPoolExportPointer>(out, uint64_t{p})) return static_cast<CUresult>(st);
  return handleOut(data, std::get<0>(out));
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr* p, CUmemoryPool pool, CUmemPoolPtrExportData* data) {
  GPOOL_TRY
  if (!p || !data) return CUDA_ERROR_INVALID_VALUE;
  GPOOL_CONN_OF_HANDLE(conn, reinterpret_cast<uint64_t>(pool));
  calls::MemPoolImportPointer::out::tuple out;
  auto r = static_cast<CUresult>(conn->call<calls::MemPoolImportPointer>(out, reinterpret_cast<uint64_t>(pool), handleIn(*data)));
  if (r != CUDA_SUCCESS) return explainForeignHandle(r, "cuMemPoolImportPointer");
  *p = std::get<0>(out).ptr;
  State::get().addAllocation(std::get<0>(out).ptr, std::get<0>(out).bytes, true);
  std::lock_guard lock(g_mu);
  g_imported_pointers.insert(*p);
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

bool gpool::client::freeImportedPoolPointer(Connection* conn, uint64_t p, uint64_t stream, CUresult& result) {
  {
    std::lock_guard lock(g_mu);
    if (!g_imported_pointers.erase(p)) return false;
  }
  State::get().removeAllocation(p);
  result = static_cast<CUresult>(conn->post<calls::MemPoolFreeImported>(p, stream));
  return true;
}
