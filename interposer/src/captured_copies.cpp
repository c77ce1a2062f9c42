// Captured copies between this process's memory and the device (captured_copies.h).
#include "captured_copies.h"

#include "host_rows.h"

namespace gpool::client {

namespace calls = proto::calls;

CUresult captureHostCopy(Connection* conn, bool to_device, const proto::DevRect& device, uint64_t host, uint64_t host_pitch,
                         uint64_t stream, bool& captured) {
  captured = false;
  // The legacy stream (0, 1: CU_STREAM_LEGACY) never captures: nothing to ask.
  if (State::get().active_captures.load() == 0 || stream <= 1) return CUDA_SUCCESS;
  HostRows rows{host, host_pitch, device.width, device.height};
  if (rows.bytes() == 0 || rows.bytes() > UINT32_MAX - sizeof(uint64_t)) return CUDA_SUCCESS;  // one channel frame at most
  if (CUresult r = openHostChannel(conn)) return r;
  uint64_t id = registerHostRows(rows);
  calls::HostCopyCapture::out::tuple out;
  int st = conn->call<calls::HostCopyCapture>(out, uint32_t{to_device ? 0u : 1u}, device, proto::Stream{stream}, id);
  captured = st == CUDA_SUCCESS && std::get<0>(out) == 1;
  if (!captured) forgetHostRows(id);
  return static_cast<CUresult>(st);
}

}  // namespace gpool::client
