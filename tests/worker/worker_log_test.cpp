// A worker's standard error in gpool-server's log (server/src/worker_log.h): each line as the words of the
// worker the server knows, printable, cut to its longest, its level as the worker's log named it; and a
// worker writing without end read only at its pace. Real pipes, the server's own io_context and spdlog.
#include "worker_log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

namespace gpool::server {
namespace {

TEST(WorkerLog, AWorkersOwnLogLineKeepsItsLevelAndWords) {
  auto l = WorkerLog::read("2026-12-02 10:00:00.123 warning gpool-worker[4242] closing connection to tcp 10.0.0.1:5: reset");
  EXPECT_EQ(l.level, spdlog::level::warn);
  EXPECT_EQ(l.text, "closing connection to tcp 10.0.0.1:5: reset");
  l = WorkerLog::read("2026-12-02 10:00:00.123 debug gpool-worker[4242] frame 7\r");
  EXPECT_EQ(l.level, spdlog::level::debug);
  EXPECT_EQ(l.text, "frame 7");
}

TEST(WorkerLog, AnyOtherLineIsAWarningWholeAndPrintable) {
  auto l = WorkerLog::read("==123==ERROR: AddressSanitizer: heap-use-after-free");
  EXPECT_EQ(l.level, spdlog::level::warn);
  EXPECT_EQ(l.text, "==123==ERROR: AddressSanitizer: heap-use-after-free");
  // An escape sequence (clear the screen) and a carriage return that would hide what came before.
  l = WorkerLog::read("\x1b[2Jok\rinfo gpool-server lease L1 ended");
  EXPECT_EQ(l.text, "\\x1b[2Jok\\x0dinfo gpool-server lease L1 ended");
  // Not a level the worker logs: the line is the worker's words, whole.
  l = WorkerLog::read("2026-12-02 10:00:00.123 shout gpool-worker[1] hello");
  EXPECT_EQ(l.level, spdlog::level::warn);
  EXPECT_EQ(l.text, "2026-12-02 10:00:00.123 shout gpool-worker[1] hello");
}

// What the server's log holds once the relay of what `write` wrote to a worker's pipe has ended.
class Relayed : public ::testing::Test {
 protected:
  void SetUp() override {
    before_ = spdlog::default_logger();
    auto logger = std::make_shared<spdlog::logger>("gpool-server", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
    logger->set_pattern("%l %v");
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  void TearDown() override { spdlog::set_default_logger(before_); }

  template <typename Write>
  std::string relay(Write write) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    asio::io_context io;
    WorkerLog::relay(io, p[0], 4242, "L7");
    std::thread writer([&] {
      write(p[1]);
      ::close(p[1]);
    });
    io.run();  // until the relay read to the end
    writer.join();
    return out_.str();
  }
  static void put(int fd, const std::string& bytes) {
    for (size_t at = 0; at < bytes.size();) {
      ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
      ASSERT_GT(n, 0);
      at += static_cast<size_t>(n);
    }
  }

  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> before_;
};

TEST_F(Relayed, EachLineIsTheWorkersTheServerKnows) {
  std::string log = relay([](int fd) {
    put(fd, "2026-12-02 10:00:00.123 info gpool-worker[1] serving tcp 10.0.0.1:5 on sim device 0\n");
    put(fd, "2026-12-02 10:00:00.124 info gpool-server[1] lease L1 ended\n");  // a forged line of the server
    put(fd, "\x1b]0;owned\x07 a title, then a line without its newline");
  });
  EXPECT_EQ(log,
            "info worker 4242 (lease L7): serving tcp 10.0.0.1:5 on sim device 0\n"
            "info worker 4242 (lease L7): gpool-server[1] lease L1 ended\n"
            "warning worker 4242 (lease L7): \\x1b]0;owned\\x07 a title, then a line without its newline\n");
}

TEST_F(Relayed, ALineLongerThanTheLongestIsCut) {
  std::string log = relay([](int fd) { put(fd, std::string(WorkerLog::kLongestLine + 1000, 'x') + "\nnext\n"); });
  EXPECT_EQ(log, "warning worker 4242 (lease L7): " + std::string(WorkerLog::kLongestLine, 'x') +
                     " [1000 more bytes of this line not logged]\nwarning worker 4242 (lease L7): next\n");
}

TEST_F(Relayed, AWorkerWritingWithoutEndIsReadAtItsPace) {
  // 10 MiB at once: the 8 it may write at once go, the other 2 at 1 MiB a second.
  const std::string line = std::string(1023, 'y') + "\n";
  auto start = std::chrono::steady_clock::now();
  std::string log = relay([&](int fd) {
    for (int i = 0; i < 10 * 1024; ++i) put(fd, line);
  });
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(took, 1.5);  // (a lower bound: a slow machine only takes longer)
  EXPECT_NE(log.find("worker 4242 (lease L7) writes more than 1024 KiB a second to its log"), std::string::npos);
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 10 * 1024 + 1);  // nothing lost
}

}  // namespace
}  // namespace gpool::server
