// Encoding of the handshake messages (docs/protocol.md, "Handshake").
#include "gpool/protocol/handshake.h"

#include "gpool/protocol/driver_settings.h"

namespace gpool::proto {

std::vector<uint8_t> encode(const HelloRequest& h) {
  std::vector<uint8_t> out;
  Writer w(out);
  w.putAll(h.magic, h.major, h.minor, h.device, h.token, h.client);
  if (!h.driver_env.empty()) {
    w.put(static_cast<uint32_t>(h.driver_env.size()));
    for (const auto& e : h.driver_env) w.put(e);
  }
  return out;
}

std::optional<HelloRequest> decodeHelloRequest(const std::vector<uint8_t>& payload) {
  HelloRequest h;
  Reader r(payload.data(), payload.size());
  if (!r.getAll(h.magic, h.major, h.minor, h.device, h.token, h.client)) return std::nullopt;
  if (!r.atEnd()) {  // the driver settings (2.10): at least one, at most one of each
    uint32_t n = 0;
    if (!r.get(n) || n == 0 || n > kDriverSettings.size()) return std::nullopt;
    h.driver_env.resize(n);
    for (auto& e : h.driver_env)
      if (!r.get(e)) return std::nullopt;
  }
  return r.atEnd() ? std::optional<HelloRequest>(h) : std::nullopt;
}

std::vector<uint8_t> encode(const HelloReply& h) {
  std::vector<uint8_t> out;
  Writer w(out);
  w.putAll(h.status, h.error, h.major, h.minor, h.driver_version, h.backend,
           static_cast<uint32_t>(h.devices.size()));
  for (const auto& d : h.devices) {
    w.put(d.name);
    w.raw(d.uuid.data(), d.uuid.size());
    w.putAll(d.total_mem, d.attributes);
  }
  w.put(h.features);
  return out;
}

std::optional<HelloReply> decodeHelloReply(const std::vector<uint8_t>& payload) {
  HelloReply h;
  Reader r(payload.data(), payload.size());
  uint32_t n = 0;
  if (!r.getAll(h.status, h.error, h.major, h.minor, h.driver_version, h.backend, n) || n > kMaxDevices)
    return std::nullopt;
  h.devices.resize(n);
  for (auto& d : h.devices) {
    if (!r.get(d.name)) return std::nullopt;
    for (auto& b : d.uuid)
      if (!r.get(b)) return std::nullopt;
    if (!r.getAll(d.total_mem, d.attributes) || d.attributes.size() > kMaxAttributes) return std::nullopt;
  }
  if (!r.atEnd() && !r.get(h.features)) return std::nullopt;  // 1.0 workers send no feature bits
  if (!r.atEnd()) return std::nullopt;
  return h;
}

}  // namespace gpool::proto
