// Captured copies between this process's memory and the device (captured_copies.h).
#include "captured_copies.h"

#include "host_rows.h"

namespace gpool::client {

namespace calls = proto::calls;

CUresult captureHostCopy(Connection* conn, const proto::HostRowsCopy& copy, uint64_t host, uint64_t host_pitch, uint64_t stream,
                         bool& captured) {
  captured = false;
  // The legacy stream (0, 1: CU_STREAM_LEGACY) never captures: nothing to ask.
  if (State::get().active_captures.load() == 0 || stream <= 1) return CUDA_SUCCESS;
  if (copy.bytes() == 0 || copy.bytes() > UINT32_MAX - sizeof(uint64_t)) return CUDA_SUCCESS;  // one channel frame at most
  if (CUresult r = openHostChannel(conn)) return r;
  uint64_t id = registerHostRows({host, host_pitch, copy.device.width, copy.device.height});
  calls::HostCopyCapture::out::tuple out;
  int st = conn->call<calls::HostCopyCapture>(out, copy, proto::Stream{stream}, id);
  captured = st == CUDA_SUCCESS && std::get<0>(out) == 1;
  if (!captured) forgetHostRows(id);
  return static_cast<CUresult>(st);
}

}  // namespace gpool::client
