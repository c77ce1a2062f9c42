// Worker-to-worker copy links (peer_links.h).
#include "peer_links.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace gpool::worker {

namespace cu = proto::cu;

namespace {

constexpr size_t kHalf = PeerLinks::kKeyBytes / 2;

void sendAll(proto::Transport& t, const void* data, size_t n) {
  proto::ConstBuffer b{data, n};
  t.send(std::span(&b, 1));
}

}  // namespace

uint32_t PeerLinks::add(Link link) {
  uint32_t id = next_++;
  links_.emplace(id, std::move(link));
  return id;
}

PeerLinks::Link* PeerLinks::find(uint32_t link, bool sending) {
  auto it = links_.find(link);
  return it == links_.end() || it->second.sending != sending ? nullptr : &it->second;
}

void PeerLinks::drop(uint32_t link, const char* why) {
  spdlog::warn("peer link {} closed: {}; its copies are relayed by the client", link, why);
  links_.erase(link);
}

proto::Status PeerLinks::listen(uint32_t& port, std::vector<uint8_t>& key, uint32_t& link) {
  if (refused_) return cu::kNotSupported;
  std::erase_if(links_, [](const auto& l) { return l.second.listener != nullptr; });  // one set-up at a time
  if (links_.size() >= kMaxLinks) return cu::kOutOfMemory;
  Link l;
  l.listener = std::make_unique<TokenListener>();
  // The connecting side presents the first half (the listener's token); the second is this side's answer.
  l.answer.resize(kHalf);
  if (RAND_bytes(l.answer.data(), static_cast<int>(kHalf)) != 1) return cu::kNotInitialized;
  if (proto::Status st = l.listener->open(port, key, kHalf); st != cu::kSuccess) return st;
  key.insert(key.end(), l.answer.begin(), l.answer.end());
  link = add(std::move(l));
  return cu::kSuccess;
}

proto::Status PeerLinks::connect(const std::string& host, uint32_t port, const std::vector<uint8_t>& key, uint32_t& link) {
  if (refused_) return cu::kNotSupported;
  if (key.size() != kKeyBytes || port == 0 || port > 65535 || host.empty() || host.size() > 255) return cu::kInvalidValue;
  if (links_.size() >= kMaxLinks) return cu::kOutOfMemory;
  Link l;
  l.sending = true;
  l.answer.assign(key.begin() + kHalf, key.end());
  std::string address = host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port) : host + ":" + std::to_string(port);
  try {
    l.channel = proto::connectTcp(address, kConnectTimeoutMs);
    l.channel->setStallTimeout(kStallTimeoutMs);
    sendAll(*l.channel, key.data(), kHalf);
  } catch (const proto::TransportError& e) {
    spdlog::info("peer link to {}: {}", address, e.what());
    return cu::kNotSupported;  // these two workers cannot reach each other: the client relays
  }
  link = add(std::move(l));
  return cu::kSuccess;
}

proto::Status PeerLinks::accept(uint32_t link) {
  Link* l = find(link, false);
  if (!l || !l->listener) return cu::kInvalidValue;
  l->channel = l->listener->accept(kAcceptTimeoutMs, "peer link");
  l->listener.reset();
  try {
    if (!l->channel) throw proto::TransportError("the sending worker never came");
    l->channel->setStallTimeout(kStallTimeoutMs);
    sendAll(*l->channel, l->answer.data(), l->answer.size());
  } catch (const proto::TransportError& e) {
    drop(link, e.what());
    return cu::kNotSupported;
  }
  return cu::kSuccess;
}

proto::Status PeerLinks::send(uint32_t link, uint64_t bytes, uint8_t* staging, uint64_t chunk, const Move& read) {
  Link* l = find(link, true);
  if (!l) return cu::kInvalidValue;
  proto::Status st = cu::kSuccess;
  try {
    if (!l->answered) {
      std::vector<uint8_t> got(kHalf);
      l->channel->recv(got.data(), got.size());
      if (CRYPTO_memcmp(got.data(), l->answer.data(), kHalf) != 0) throw proto::TransportError("the receiver did not answer with the key");
      l->answered = true;
    }
    sendAll(*l->channel, &bytes, sizeof bytes);
    for (uint64_t off = 0; off < bytes; off += chunk) {
      uint64_t n = std::min(chunk, bytes - off);
      if ((st = read(staging, off, n)) != cu::kSuccess) throw proto::TransportError("reading the device failed");
      sendAll(*l->channel, staging, n);
    }
  } catch (const proto::TransportError& e) {
    drop(link, e.what());
  }
  return st;  // a device error is this worker's; a broken link is the receiver's to report
}

proto::Status PeerLinks::receive(uint32_t link, uint64_t bytes, uint8_t* staging, uint64_t chunk, const Move& write) {
  Link* l = find(link, false);
  if (!l || !l->channel) return cu::kInvalidValue;
  proto::Status st = cu::kSuccess;
  try {
    uint64_t announced = 0;
    l->channel->recv(&announced, sizeof announced);
    if (announced != bytes) throw proto::TransportError("the sender announced " + std::to_string(announced) + " bytes, " + std::to_string(bytes) + " were expected");
    for (uint64_t off = 0; off < bytes; off += chunk) {
      uint64_t n = std::min(chunk, bytes - off);
      l->channel->recv(staging, n);
      if (st == cu::kSuccess) st = write(staging, off, n);  // keep reading: the link stays in step
    }
  } catch (const proto::TransportError& e) {
    drop(link, e.what());
    return cu::kNotReady;  // the copy did not complete; the client relays it
  }
  return st;
}

}  // namespace gpool::worker
