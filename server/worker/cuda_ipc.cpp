// The cuda backend's IPC handles, and memory shared as file descriptors (shareable_handles.h).
#include "cuda_backend_class.h"

namespace gpool::worker {

// IPC: the driver's own handles, filed in the host's registry under a key the client's handle names.
Status CudaBackend::IpcGetMemHandle(AllocBase p, std::vector<uint8_t>& handle) {
  CUipcMemHandle h;
  if (CUresult r = d_.cuIpcGetMemHandle_(&h, p.ptr); r != CUDA_SUCCESS) return r;
  size_t size = 0;
  CUdeviceptr base = 0;
  if (CUresult r = d_.cuMemGetAddressRange_(&base, &size, p.ptr); r != CUDA_SUCCESS) return r;
  std::vector<uint8_t> record(sizeof h + sizeof(uint64_t));
  uint64_t bytes = size;
  std::memcpy(record.data(), &h, sizeof h);
  std::memcpy(record.data() + sizeof h, &bytes, sizeof bytes);
  return publishMemory(p.ptr, record, handle);
}

Status CudaBackend::IpcOpenMemHandle(std::vector<uint8_t> handle, uint32_t flags, IpcMapping& out) {
  std::vector<uint8_t> record;
  IpcRegistry::RecordFile hold;
  if (Status st = ipc_.lookupHeld(IpcRegistry::Kind::kMemory, handle, record, hold); st != CUDA_SUCCESS) return st;
  CUipcMemHandle h;
  uint64_t bytes = 0;
  if (record.size() != sizeof h + sizeof bytes) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(&h, record.data(), sizeof h);
  std::memcpy(&bytes, record.data() + sizeof h, sizeof bytes);
  CUdeviceptr p = 0;
  CUresult r = d_.cuIpcOpenMemHandle_(&p, h, flags);
  out = IpcMapping{p, bytes};
  if (r == CUDA_SUCCESS) imports_.keep(Shared::kAllocation, p, std::move(hold));
  return r;
}

Status CudaBackend::IpcCloseMemHandle(IpcMapped p) {
  imports_.letGo(Shared::kAllocation, p.ptr);
  return d_.cuIpcCloseMemHandle_(p.ptr);
}

Status CudaBackend::IpcGetEventHandle(Event e, std::vector<uint8_t>& handle) {
  CUipcEventHandle h;
  if (CUresult r = d_.cuIpcGetEventHandle_(&h, event_(e)); r != CUDA_SUCCESS) return r;
  return ipc_.publish(IpcRegistry::Kind::kEvent, std::vector<uint8_t>(h.reserved, h.reserved + sizeof h.reserved), handle);
}

Status CudaBackend::IpcOpenEventHandle(std::vector<uint8_t> handle, Created<Event>& out) {
  std::vector<uint8_t> record;
  if (Status st = ipc_.lookup(IpcRegistry::Kind::kEvent, handle, record); st != CUDA_SUCCESS) return st;
  CUipcEventHandle h;
  if (record.size() != sizeof h.reserved) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(h.reserved, record.data(), sizeof h.reserved);
  CUevent e = nullptr;
  CUresult r = d_.cuIpcOpenEventHandle_(&e, h);
  out = reinterpret_cast<uint64_t>(e);
  return r;
}

// Physical memory shared with other processes (shareable_handles.h): the driver's own descriptors.
Status CudaBackend::exportPhysical(uint64_t h, int& fd) {
  return d_.cuMemExportToShareableHandle_(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}

Status CudaBackend::exportPool(uint64_t pool, int& fd) {
  return d_.cuMemPoolExportToShareableHandle_(&fd, reinterpret_cast<CUmemoryPool>(pool), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}

Status CudaBackend::importPool(int fd, uint64_t& pool) {
  CUmemoryPool imported = nullptr;
  CUresult r = d_.cuMemPoolImportFromShareableHandle_(&imported, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  pool = reinterpret_cast<uint64_t>(imported);
  return r;
}

// A pool allocation's record: the driver's export data, then the allocation's size.
Status CudaBackend::exportPoolPointer(uint64_t ptr, std::vector<uint8_t>& record) {
  CUmemPoolPtrExportData data{};
  if (CUresult r = d_.cuMemPoolExportPointer_(&data, ptr); r != CUDA_SUCCESS) return r;
  const DeviceRange* range = memory_ ? memory_->allocationAt(ptr) : nullptr;
  uint64_t bytes = range ? range->bytes : 0;
  record.resize(sizeof data + sizeof bytes);
  std::memcpy(record.data(), &data, sizeof data);
  std::memcpy(record.data() + sizeof data, &bytes, sizeof bytes);
  return CUDA_SUCCESS;
}

Status CudaBackend::importPoolPointer(uint64_t pool, const std::vector<uint8_t>& record, IpcMapping& out) {
  CUmemPoolPtrExportData data{};
  uint64_t bytes = 0;
  if (record.size() != sizeof data + sizeof bytes) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(&data, record.data(), sizeof data);
  std::memcpy(&bytes, record.data() + sizeof data, sizeof bytes);
  CUdeviceptr p = 0;
  CUresult r = d_.cuMemPoolImportPointer_(&p, reinterpret_cast<CUmemoryPool>(pool), &data);
  out = IpcMapping{p, bytes};
  return r;
}

Status CudaBackend::importPhysical(int fd, uint64_t&, uint64_t& h) {
  CUmemGenericAllocationHandle imported = 0;
  CUresult r = d_.cuMemImportFromShareableHandle_(&imported, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  h = imported;
  return r;
}
}  // namespace gpool::worker
