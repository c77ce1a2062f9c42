// What a worker inherits of gpool-server's environment (server/src/worker_environment.h), with --worker-uids
// or not: what workers and their driver read, and the client's driver settings in place of the server's.
#include "worker_environment.h"

#include <gtest/gtest.h>

namespace gpool::server {
namespace {

TEST(WorkerEnvironment, AWorkerInheritsOnlyWhatItAndItsDriverReadOfTheServersEnvironment) {
  for (const char* kept : {"PATH", "HOME", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                           "__NV_PRIME_RENDER_OFFLOAD", "UCX_TLS", "GPOOL_LOG_LEVEL", "LC_ALL", "ASAN_OPTIONS"})
    EXPECT_TRUE(inheritedByWorkers(kept)) << kept;
  for (const char* dropped : {"AWS_SECRET_ACCESS_KEY", "ETCD_PASSWORD", "LD_PRELOAD", "CUDA_CACHE_PATH", "PATHS", "SSH_AUTH_SOCK", "CUDA", "", "HOMEDIR"})
    EXPECT_FALSE(inheritedByWorkers(dropped)) << dropped;
}

TEST(WorkerEnvironment, TheClientsDriverSettingsTakeThePlaceOfTheServers) {
  char path[] = "PATH=/usr/bin", secret[] = "AWS_SECRET_ACCESS_KEY=hunter2", blocking[] = "CUDA_LAUNCH_BLOCKING=0",
       odd[] = "NOEQUALS";
  char* server[] = {path, secret, blocking, odd, nullptr};
  EXPECT_EQ(workerEnvironment(server, {"CUDA_LAUNCH_BLOCKING=1"}),
            (std::vector<std::string>{"PATH=/usr/bin", "CUDA_LAUNCH_BLOCKING=1"}));
  EXPECT_EQ(workerEnvironment(server, {}), (std::vector<std::string>{"PATH=/usr/bin", "CUDA_LAUNCH_BLOCKING=0"}));
  EXPECT_TRUE(workerEnvironment(nullptr, {}).empty());
}

}  // namespace
}  // namespace gpool::server
