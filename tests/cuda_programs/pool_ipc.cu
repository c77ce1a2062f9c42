// Memory pools shared between processes, as NVIDIA's streamOrderedAllocationIPC sample does it: the parent
// creates an exportable pool, allocates from it in stream order and fills the allocation, exports the pool
// as a file descriptor (sent to a child process over a Unix socket) and the allocation as
// cudaMemPoolPtrExportData. The child imports the pool and, against it, the allocation (an allocation of
// another pool is refused, as the sample's search for the right pool needs), reads what the parent wrote,
// writes back and frees it in stream order; the parent sees the write. A pool created without a handle
// type cannot be exported, and an imported pool allocates nothing.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "processes.h"

namespace {

const size_t kBytes = 1 << 20;

cudaMemPool_t makePool(cudaMemAllocationHandleType type) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = type;
  props.location = {cudaMemLocationTypeDevice, 0};
  cudaMemPool_t pool = nullptr;
  CK(cudaMemPoolCreate(&pool, &props));
  return pool;
}

int child(int sock, const std::string& mine_hex, const std::string& other_hex) {
  CK(cudaSetDevice(0));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaMemPoolPtrExportData mine, other;
  unhex(mine_hex, &mine, sizeof mine);
  unhex(other_hex, &other, sizeof other);
  int fd = receiveFd(sock);
  check(fd >= 0, "child: received the pool's descriptor");
  cudaMemPool_t pool = nullptr;
  CK(cudaMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                          cudaMemHandleTypePosixFileDescriptor, 0));
  close(fd);
  cudaMemLocation here{cudaMemLocationTypeDevice, 0};
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  CK(cudaMemPoolGetAccess(&flags, pool, &here));
  check(flags == cudaMemAccessFlagsProtReadWrite, "child: the imported pool is accessible from this device");
  void* p = nullptr;
  check(cudaMemPoolImportPointer(&p, pool, &other) != cudaSuccess, "child: another pool's allocation is refused against it");
  cudaGetLastError();
  check(cudaMallocFromPoolAsync(&p, 4096, pool, stream) != cudaSuccess, "child: an imported pool allocates nothing");
  cudaGetLastError();
  CK(cudaMemPoolImportPointer(&p, pool, &mine));
  std::vector<uint8_t> got(kBytes);
  CK(cudaMemcpyAsync(got.data(), p, kBytes, cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  bool ok = true;
  for (size_t i = 0; i < kBytes; ++i) ok &= got[i] == static_cast<uint8_t>(i * 3 + 5);
  check(ok, "child: reads what the parent wrote");
  CK(cudaMemsetAsync(p, 0x77, 4096, stream));
  CK(cudaFreeAsync(p, stream));  // before the exporter frees it, as CUDA asks
  CK(cudaStreamSynchronize(stream));
  CK(cudaMemPoolDestroy(pool));
  CK(cudaStreamDestroy(stream));
  childDone(sock);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "child") return child(std::stoi(argv[2]), argv[3], argv[4]);
  CK(cudaSetDevice(0));
  int types = 0;
  CK(cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
  check(types & cudaMemHandleTypePosixFileDescriptor, "pools can be shared as POSIX file descriptors");
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  cudaMemPool_t plain = makePool(cudaMemHandleTypeNone);
  int fd = -1;
  check(cudaMemPoolExportToShareableHandle(&fd, plain, cudaMemHandleTypePosixFileDescriptor, 0) != cudaSuccess,
        "a pool created without a handle type cannot be exported");
  cudaGetLastError();
  CK(cudaMemPoolDestroy(plain));

  cudaMemPool_t pool = makePool(cudaMemHandleTypePosixFileDescriptor), second = makePool(cudaMemHandleTypePosixFileDescriptor);
  void *p = nullptr, *q = nullptr;
  CK(cudaMallocFromPoolAsync(&p, kBytes, pool, stream));
  CK(cudaMallocFromPoolAsync(&q, kBytes, second, stream));
  std::vector<uint8_t> pattern(kBytes);
  for (size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<uint8_t>(i * 3 + 5);
  CK(cudaMemcpyAsync(p, pattern.data(), kBytes, cudaMemcpyHostToDevice, stream));
  CK(cudaStreamSynchronize(stream));
  CK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
  cudaMemPoolPtrExportData mine, other;
  CK(cudaMemPoolExportPointer(&mine, p));
  CK(cudaMemPoolExportPointer(&other, q));

  runChild(argv[0], fd, {hex(&mine, sizeof mine), hex(&other, sizeof other)},
           "the child imported, read, wrote and freed the allocation");
  std::vector<uint8_t> got(4096);
  CK(cudaMemcpy(got.data(), p, 4096, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (uint8_t b : got) ok &= b == 0x77;
  check(ok, "the parent sees what the child wrote through the pool's memory");
  close(fd);
  CK(cudaFreeAsync(p, stream));
  CK(cudaFreeAsync(q, stream));
  CK(cudaStreamSynchronize(stream));
  CK(cudaMemPoolDestroy(pool));
  CK(cudaMemPoolDestroy(second));
  std::printf(failures ? "%d FAILED\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
