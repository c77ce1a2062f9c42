// In-memory byte pipes for protocol tests, with injected truncation and corruption.
#include "gpool/protocol/loopback_transport.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

namespace gpool::proto {
namespace {

struct Pipe {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<uint8_t> bytes;
  bool closed = false;
};

class LoopbackEnd final : public Transport {
 public:
  LoopbackEnd(std::shared_ptr<Pipe> in, std::shared_ptr<Pipe> out, FaultPlan faults, std::string name)
      : in_(std::move(in)), out_(std::move(out)), faults_(faults), name_(std::move(name)) {}
  ~LoopbackEnd() override { shutdown(); }

  void send(std::span<const ConstBuffer> buffers) override {
    std::lock_guard lock(out_->mu);
    if (out_->closed) throw TransportError("loopback peer closed");
    for (const auto& b : buffers) {
      const auto* p = static_cast<const uint8_t*>(b.data);
      for (size_t i = 0; i < b.size; ++i, ++sent_) {
        if (faults_.close_after_bytes >= 0 && sent_ >= faults_.close_after_bytes) {
          out_->closed = true;
          out_->cv.notify_all();
          throw TransportError("loopback: injected close");
        }
        uint8_t v = p[i];
        if (sent_ == faults_.corrupt_at_byte) v ^= 0xff;
        out_->bytes.push_back(v);
      }
    }
    out_->cv.notify_all();
  }

  void recv(void* data, size_t n, bool /*idle_ok*/ = false) override {
    auto* p = static_cast<uint8_t*>(data);
    std::unique_lock lock(in_->mu);
    while (n > 0) {
      in_->cv.wait(lock, [&] { return !in_->bytes.empty() || in_->closed; });
      if (in_->bytes.empty()) throw TransportError("connection closed by loopback peer");
      size_t k = std::min(n, in_->bytes.size());
      std::copy_n(in_->bytes.begin(), k, p);
      in_->bytes.erase(in_->bytes.begin(), in_->bytes.begin() + static_cast<std::ptrdiff_t>(k));
      p += k;
      n -= k;
    }
  }

  void shutdown() override {
    for (auto* pipe : {in_.get(), out_.get()}) {
      std::lock_guard lock(pipe->mu);
      pipe->closed = true;
      pipe->cv.notify_all();
    }
  }

  std::string peer() const override { return name_; }

 private:
  std::shared_ptr<Pipe> in_, out_;
  FaultPlan faults_;
  std::string name_;
  int64_t sent_ = 0;
};

}  // namespace

std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>> makeLoopbackPair(FaultPlan faults) {
  auto a_to_b = std::make_shared<Pipe>();
  auto b_to_a = std::make_shared<Pipe>();
  return {std::make_unique<LoopbackEnd>(b_to_a, a_to_b, faults, "loopback b"),
          std::make_unique<LoopbackEnd>(a_to_b, b_to_a, FaultPlan{}, "loopback a")};
}

}  // namespace gpool::proto
