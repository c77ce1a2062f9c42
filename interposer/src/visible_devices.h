// Which of a lease's devices this process sees, in what order, and the UUID each one shows.
// CUDA_VISIBLE_DEVICES is read as CUDA reads it, over the lease's devices instead of the machine's: a
// comma-separated list of device indices or UUIDs ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", or enough of
// its start to name one device: "GPU-8932f937"), in the order given, up to the first entry that names no
// device, names one twice, or could name several.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gpool::client {

struct Share;
using Uuid = std::array<uint8_t, 16>;

// Whether CUDA_VISIBLE_DEVICES names a device by UUID: then every device of the lease is connected to
// learn its UUID before the choice, and those it does not name are let go.
bool namesDevicesByUuid(const char* env);

// The devices `env` shows among a lease's `count`, in its order; every one when `env` is unset. `uuids`
// are the devices' UUIDs as text ("GPU-..."), or empty when they are not known (then a UUID entry names
// nothing). The entry that ended the list, if one did, is left in `ignored`.
std::vector<int> visibleDevices(const char* env, int count, const std::vector<std::string>& uuids, std::string& ignored);

// For each share of a lease, whether an earlier share is on the same GPU (the same server and device).
std::vector<bool> repeatedShares(const std::vector<Share>& lease);

// One connected device of a lease: where it is in the lease, the UUID its GPU has, and whether an earlier
// share of the lease is on the same GPU.
struct LeaseDevice {
  int position = 0;
  Uuid uuid{};
  bool repeat = false;
};

// CUDA's devices have distinct UUIDs, and frameworks and NVML tell devices apart by them, but two shares of
// one GPU report the GPU's. Each device that repeats an earlier share's GPU, or whose UUID an earlier one in
// `devices` shows, gets the GPU's with the version nibble set to 8 (a derived UUID, RFC 9562) and its lease
// position folded into the last byte. A device shows the same UUID whichever of the lease's devices
// CUDA_VISIBLE_DEVICES shows beside it, so a UUID one process reads names that device in a child.
void keepUuidsApart(std::vector<LeaseDevice>& devices);

}  // namespace gpool::client
