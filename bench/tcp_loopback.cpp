// The loopback TCP limit gpool's copies are measured against: one stream of 4 MiB writes (GB/s) and an
// 8-byte ping-pong (µs per round trip), with the same socket options gpool uses (through gpool's transport).
#include <asio.hpp>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "gpool/protocol/transport.h"

int main() {
  asio::io_context io;
  asio::ip::tcp::acceptor acc(io, {asio::ip::make_address("127.0.0.1"), 0});
  int port = acc.local_endpoint().port();
  const size_t chunk = 4 << 20, total = size_t{4} << 30;
  const int pings = 20000;
  std::thread server([&] {
    asio::ip::tcp::socket s(io);
    acc.accept(s);
    auto t = gpool::proto::adoptTcpSocket(s.release());
    std::vector<char> buf(chunk);
    for (size_t got = 0; got < total; got += chunk) t->recv(buf.data(), chunk);
    char ack = 1;
    gpool::proto::ConstBuffer b{&ack, 1};
    t->send(std::span(&b, 1));
    char msg[8];
    for (int i = 0; i < pings; ++i) {
      t->recv(msg, 8);
      gpool::proto::ConstBuffer m{msg, 8};
      t->send(std::span(&m, 1));
    }
  });
  auto c = gpool::proto::connectTcp("127.0.0.1:" + std::to_string(port));
  std::vector<char> buf(chunk, 7);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t sent = 0; sent < total; sent += chunk) {
    gpool::proto::ConstBuffer b{buf.data(), chunk};
    c->send(std::span(&b, 1));
  }
  char ack;
  c->recv(&ack, 1);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tcp_stream %.2f GB/s\n", total / secs / 1e9);
  char msg[8] = {};
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < pings; ++i) {
    gpool::proto::ConstBuffer m{msg, 8};
    c->send(std::span(&m, 1));
    c->recv(msg, 8);
  }
  secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tcp_roundtrip_8B %.2f us\n", secs / pings * 1e6);
  server.join();
  return 0;
}
