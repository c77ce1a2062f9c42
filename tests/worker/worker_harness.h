// A sim worker serving one client over the in-memory transport, for tests that speak the protocol to it.
#pragma once

#include <memory>
#include <thread>
#include <tuple>

#include "dispatcher.h"
#include "gpool/protocol/loopback_transport.h"
#include "sim_backend.h"

namespace gpool::test {

struct Harness {
  std::unique_ptr<proto::Transport> client, server;
  worker::SimBackend backend{worker::SimOptions{}};
  worker::ServeResult result;
  std::thread thread;
  explicit Harness(proto::FaultPlan faults = {}) {
    std::tie(client, server) = proto::makeLoopbackPair(faults);
    proto::HelloReply hello;
    backend.open(0, hello);
    uint64_t limit = hello.devices.at(0).total_mem;
    thread = std::thread([this, limit] { result = worker::Dispatcher(backend, *server, limit).serve(); });
  }
  worker::ServeResult finish() {
    client->shutdown();
    thread.join();
    return result;
  }
  ~Harness() {
    if (thread.joinable()) finish();
  }
};

}  // namespace gpool::test
