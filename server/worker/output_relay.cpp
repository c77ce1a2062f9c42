// The worker's standard output, relayed to its client (output_relay.h).
#include "output_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "gpool/protocol/calls.h"
#include "gpool/protocol/frame_io.h"

namespace gpool::worker {

OutputRelay::OutputRelay(int read_fd, bool start_now) : read_fd_(read_fd), stop_fd_(::eventfd(0, EFD_CLOEXEC)) {
  ::fcntl(read_fd_, F_SETFL, ::fcntl(read_fd_, F_GETFL) | O_NONBLOCK);
  if (start_now) start();
}

void OutputRelay::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

OutputRelay::~OutputRelay() {
  uint64_t one = 1;
  if (::write(stop_fd_, &one, sizeof one) < 0) {}
  if (thread_.joinable()) thread_.join();
  ::close(stop_fd_);
  ::close(read_fd_);
}

std::unique_ptr<OutputRelay> OutputRelay::captureStdout() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  std::fflush(stdout);
  if (::dup2(fds[1], STDOUT_FILENO) < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return nullptr;
  }
  ::close(fds[1]);
  return std::make_unique<OutputRelay>(fds[0], false);
}

void OutputRelay::readAvailable() {
  uint8_t buf[65536];
  for (;;) {
    ssize_t n = ::read(read_fd_, buf, sizeof buf);
    if (n <= 0) return;  // drained (EAGAIN), or closed
    size_t room = held_.size() < kMaxHeld ? kMaxHeld - held_.size() : 0;
    size_t keep = std::min(room, static_cast<size_t>(n));
    held_.insert(held_.end(), buf, buf + keep);
    dropped_ += static_cast<size_t>(n) - keep;
  }
}

// Drains the pipe as it fills, so a GPU's printf never blocks the driver on a full pipe.
void OutputRelay::loop() {
  for (;;) {
    pollfd p[2] = {{read_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) continue;
    if (p[1].revents) return;
    std::lock_guard lock(mu_);
    readAvailable();
    if (p[0].revents & (POLLHUP | POLLERR | POLLNVAL) && !(p[0].revents & POLLIN)) return;
  }
}

void OutputRelay::sendPending(proto::Transport& t) {
  if (!enabled_) return;  // (the thread keeps the pipe drained meanwhile)
  std::fflush(stdout);    // (what went through stdio on this process is in the pipe now)
  std::lock_guard lock(mu_);
  readAvailable();
  if (held_.empty() && dropped_ == 0) return;
  if (dropped_) {
    std::string note = "\n[gpool: " + std::to_string(dropped_) + " bytes of the GPU's output were dropped: more than " +
                       std::to_string(kMaxHeld >> 20) + " MiB came between two replies]\n";
    held_.insert(held_.end(), note.begin(), note.end());
    dropped_ = 0;
  }
  for (size_t off = 0; off < held_.size();) {
    size_t n = std::min<size_t>(held_.size() - off, proto::kMaxOutputFrame);
    proto::sendFrame(t, proto::kMsgOutput, 0, 0, held_.data() + off, n);
    off += n;
  }
  held_.clear();
}

}  // namespace gpool::worker
