// Virtual memory shared between processes as POSIX file descriptors, as NVIDIA's memMapIPCDrv sample does
// it: the parent creates physical memory that may be exported, maps it, fills it and exports a descriptor,
// which it sends to a child process (the same program, started again) over a Unix socket (SCM_RIGHTS).
// The child imports it, maps it in a reservation of its own, reads what the parent wrote and writes back;
// the parent sees that through its own mapping. A descriptor gpool did not make, a fabric handle and memory
// created without the POSIX handle type are refused as CUDA refuses them.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "processes.h"

namespace {

using Export = CUresult (*)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
using Import = CUresult (*)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType);

struct Vmm {
  decltype(&cuMemGetAllocationGranularity) granularity = driverEntryPoint<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
  decltype(&cuMemAddressReserve) reserve = driverEntryPoint<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
  decltype(&cuMemAddressFree) addressFree = driverEntryPoint<decltype(&cuMemAddressFree)>("cuMemAddressFree");
  decltype(&cuMemCreate) create = driverEntryPoint<decltype(&cuMemCreate)>("cuMemCreate");
  decltype(&cuMemRelease) release = driverEntryPoint<decltype(&cuMemRelease)>("cuMemRelease");
  decltype(&cuMemMap) map = driverEntryPoint<decltype(&cuMemMap)>("cuMemMap");
  decltype(&cuMemUnmap) unmap = driverEntryPoint<decltype(&cuMemUnmap)>("cuMemUnmap");
  decltype(&cuMemSetAccess) setAccess = driverEntryPoint<decltype(&cuMemSetAccess)>("cuMemSetAccess");
  decltype(&cuDeviceGetAttribute) attribute = driverEntryPoint<decltype(&cuDeviceGetAttribute)>("cuDeviceGetAttribute");
  decltype(&cuMemGetAllocationPropertiesFromHandle) props =
      driverEntryPoint<decltype(&cuMemGetAllocationPropertiesFromHandle)>("cuMemGetAllocationPropertiesFromHandle");
  Export exportHandle = driverEntryPoint<Export>("cuMemExportToShareableHandle");
  Import importHandle = driverEntryPoint<Import>("cuMemImportFromShareableHandle");

  // Reserves `bytes`, maps `h` there with read-write access for device 0, and returns the address.
  CUdeviceptr mapped(CUmemGenericAllocationHandle h, size_t bytes) {
    CUdeviceptr va = 0;
    check(reserve(&va, bytes, 0, 0, 0) == CUDA_SUCCESS, "cuMemAddressReserve");
    check(map(va, bytes, 0, h, 0) == CUDA_SUCCESS, "cuMemMap");
    CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    check(setAccess(va, bytes, &access, 1) == CUDA_SUCCESS, "cuMemSetAccess");
    return va;
  }
  void unmapped(CUdeviceptr va, size_t bytes) {
    check(unmap(va, bytes) == CUDA_SUCCESS, "cuMemUnmap");
    check(addressFree(va, bytes) == CUDA_SUCCESS, "cuMemAddressFree");
  }
};

CUmemAllocationProp deviceProp(bool exportable) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  if (exportable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

int child(int sock, size_t bytes) {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  Vmm v;
  int fd = receiveFd(sock);
  check(fd >= 0, "child: received a descriptor");
  int pipes[2];
  check(pipe(pipes) == 0, "a pipe");
  CUmemGenericAllocationHandle h = 0;
  check(v.importHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(pipes[0])), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
            CUDA_ERROR_INVALID_VALUE, "child: a descriptor that is no exported memory is refused");
  check(v.importHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)), CU_MEM_HANDLE_TYPE_FABRIC) != CUDA_SUCCESS,
        "child: the same descriptor as a fabric handle is refused");
  check(v.importHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
            CUDA_SUCCESS, "child: cuMemImportFromShareableHandle");
  close(fd);  // the imported handle holds the memory, not the descriptor
  CUmemAllocationProp prop{};
  check(v.props(&prop, h) == CUDA_SUCCESS && prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
            (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "child: the imported handle's properties");
  CUdeviceptr va = v.mapped(h, bytes);
  check(v.release(h) == CUDA_SUCCESS, "child: cuMemRelease while mapped (the mapping keeps the memory)");
  std::vector<uint8_t> got(bytes);
  CK(cudaMemcpy(got.data(), reinterpret_cast<void*>(va), bytes, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (size_t i = 0; i < bytes; ++i) ok &= got[i] == static_cast<uint8_t>(i * 13 + 1);
  check(ok, "child: reads what the parent wrote");
  CK(cudaMemset(reinterpret_cast<void*>(va), 0x5a, 4096));
  CK(cudaDeviceSynchronize());
  v.unmapped(va, bytes);
  childDone(sock);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "child") return child(std::stoi(argv[2]), std::stoul(argv[3]));
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  Vmm v;
  int posix = 0, vmm = 0, fabric = 1;
  check(v.attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) == CUDA_SUCCESS && vmm == 1,
        "the device supports virtual memory management");
  check(v.attribute(&posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0) == CUDA_SUCCESS && posix == 1,
        "the device shares memory as POSIX file descriptors");
  check(v.attribute(&fabric, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0) == CUDA_SUCCESS && fabric == 0,
        "and not as fabric handles");

  CUmemAllocationProp prop = deviceProp(true);
  size_t g = 0;
  check(v.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == CUDA_SUCCESS && g > 0, "granularity");
  const size_t bytes = 2 * g;
  CUmemGenericAllocationHandle h = 0;
  check(v.create(&h, bytes, &prop, 0) == CUDA_SUCCESS, "cuMemCreate of exportable memory");
  CUdeviceptr va = v.mapped(h, bytes);
  std::vector<uint8_t> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>(i * 13 + 1);
  CK(cudaMemcpy(reinterpret_cast<void*>(va), pattern.data(), bytes, cudaMemcpyHostToDevice));

  int fd = -1;
  check(v.exportHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS && fd >= 0,
        "cuMemExportToShareableHandle gives a descriptor");
  check(v.exportHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0) != CUDA_SUCCESS, "a fabric handle is refused");
  CUmemGenericAllocationHandle plain = 0;
  CUmemAllocationProp plain_prop = deviceProp(false);
  check(v.create(&plain, g, &plain_prop, 0) == CUDA_SUCCESS, "cuMemCreate without a handle type");
  int plain_fd = -1;
  check(v.exportHandle(&plain_fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_ERROR_INVALID_VALUE,
        "memory created without the POSIX handle type cannot be exported");
  check(v.release(plain) == CUDA_SUCCESS, "release it");

  // The exporting process may import its own descriptor: a second handle to the same memory.
  CUmemGenericAllocationHandle again = 0;
  check(v.importHandle(&again, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
            CUDA_SUCCESS, "the exporter imports its own descriptor");
  CUdeviceptr alias = v.mapped(again, bytes);
  std::vector<uint8_t> got(bytes);
  CK(cudaMemcpy(got.data(), reinterpret_cast<void*>(alias), bytes, cudaMemcpyDeviceToHost));
  check(got == pattern, "the imported mapping shows the same memory");
  v.unmapped(alias, bytes);
  check(v.release(again) == CUDA_SUCCESS, "release the imported handle");

  runChild(argv[0], fd, {std::to_string(bytes)}, "the child imported, read and wrote the memory");
  CK(cudaMemcpy(got.data(), reinterpret_cast<void*>(va), 4096, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (size_t i = 0; i < 4096; ++i) ok &= got[i] == 0x5a;
  check(ok, "the parent sees what the child wrote through the shared memory");
  close(fd);
  v.unmapped(va, bytes);
  check(v.release(h) == CUDA_SUCCESS, "cuMemRelease");
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
