// Which host (and boot) a process runs on: the kernel's boot id, which differs between hosts and between
// boots of one host. Shared memory (shm_transport.h) and IPC handles (server/worker/ipc_registry.h) both
// tell "this host" by it.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace gpool::proto {

// The boot id as the kernel writes it (a UUID in text); empty when it cannot be read.
std::string kernelBootId();
// The same 16 bytes, from its hex digits (zeros when it cannot be read).
std::array<uint8_t, 16> kernelBootIdBytes();

}  // namespace gpool::proto
