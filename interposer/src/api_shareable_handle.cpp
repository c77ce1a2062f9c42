// Physical memory shared between processes as a file descriptor (cuMemExportToShareableHandle and
// cuMemImportFromShareableHandle with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), as NVIDIA's memMapIPCDrv
// sample, NCCL and PyTorch's expandable segments share memory: the exporting process gets a real
// descriptor it may pass to another process over a Unix socket (SCM_RIGHTS) or by fork, as it would the
// driver's. The descriptor is a sealed memfd holding gpool's 64-byte handle, which the importing process's
// worker presents to the exporting one's to receive the driver's own descriptor
// (server/worker/shareable_handles.h). Both processes' leases must be on one GPU host, as for IPC.
// Imported memory belongs to the exporter's lease; the export lasts until the exporter releases it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "state.h"

using namespace gpool::client;
namespace calls = gpool::proto::calls;

namespace {

constexpr char kMagic[8] = {'g', 'p', 'o', 'o', 'l', 'v', 'm', '1'};
constexpr size_t kHandleBytes = 64;
constexpr size_t kFileBytes = sizeof kMagic + kHandleBytes;

CUresult refuseType(CUmemAllocationHandleType type, const char* call) {
  if (type == CU_MEM_HANDLE_TYPE_FABRIC) {
    GPOOL_LOG(Level::kWarn, "%s: fabric handles need an IMEX domain across GPU hosts; gpool shares memory between "
              "processes on one GPU host as POSIX file descriptors (returning CUDA_ERROR_NOT_SUPPORTED)", call);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_ERROR_INVALID_VALUE;  // Windows handles, or no type: not on Linux
}

// A sealed memfd holding the handle: the descriptor the program receives and passes on.
int handleFile(const std::vector<uint8_t>& handle) {
  int fd = memfd_create("gpool-shareable-handle", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  uint8_t file[kFileBytes];
  std::memcpy(file, kMagic, sizeof kMagic);
  std::memcpy(file + sizeof kMagic, handle.data(), kHandleBytes);
  if (pwrite(fd, file, sizeof file, 0) != static_cast<ssize_t>(sizeof file) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The handle in a descriptor handleFile made (here or in another process), or false for any other file.
bool readHandleFile(int fd, std::vector<uint8_t>& handle) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(kFileBytes)) return false;
  if (fcntl(fd, F_GET_SEALS) != (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) return false;
  uint8_t file[kFileBytes];
  if (pread(fd, file, sizeof file, 0) != static_cast<ssize_t>(sizeof file)) return false;
  if (std::memcmp(file, kMagic, sizeof kMagic) != 0) return false;
  handle.assign(file + sizeof kMagic, file + kFileBytes);
  return true;
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
  if (std::get<0>(out).size() != kHandleBytes) return CUDA_ERROR_UNKNOWN;
  int fd = handleFile(std::get<0>(out));
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
  GPOOL_CATCH
}

GPOOL_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* h, void* os_handle,
                                                     CUmemAllocationHandleType type) {
  GPOOL_TRY
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return refuseType(type, "cuMemImportFromShareableHandle");
  std::vector<uint8_t> handle;
  if (!readHandleFile(static_cast<int>(reinterpret_cast<uintptr_t>(os_handle)), handle)) {
    GPOOL_LOG(Level::kWarn, "cuMemImportFromShareableHandle: the descriptor is not one cuMemExportToShareableHandle "
              "made through gpool (returning CUDA_ERROR_INVALID_VALUE)");
    return CUDA_ERROR_INVALID_VALUE;
  }
  GPOOL_CONN(conn);
  calls::MemImportShareable::out::tuple out;
  auto r = static_cast<CUresult>(conn->call<calls::MemImportShareable>(out, handle, uint32_t{type}));
  if (r == CUDA_ERROR_NOT_SUPPORTED)
    GPOOL_LOG(Level::kError, "cuMemImportFromShareableHandle: the memory was exported by a process whose GPU is on "
              "another host; sharing it needs both processes' leases on one GPU host (returning CUDA_ERROR_NOT_SUPPORTED)");
  if (r != CUDA_SUCCESS) return r;
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
