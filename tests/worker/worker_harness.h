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
  // `output`: the worker's standard output as the dispatcher relays it (none: not relayed).
  explicit Harness(proto::FaultPlan faults = {}, worker::OutputRelay* output = nullptr) {
    std::tie(client, server) = proto::makeLoopbackPair(faults);
    proto::HelloReply hello;
    backend.open(0, hello);
    uint64_t limit = hello.devices.at(0).total_mem;
    thread = std::thread([this, limit, output] {
      worker::Dispatcher d(backend, *server, limit);
      d.relayOutput(output);
      result = d.serve();
    });
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
