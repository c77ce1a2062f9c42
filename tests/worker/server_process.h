// Starts a real gpool-server (sim backend) on a free loopback port for tests, and stops it.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace gpool::test {

class ServerProcess {
 public:
  // `open_files`: the server's open-file limit (0: inherited).
  explicit ServerProcess(std::vector<std::string> extra = {}, rlim_t open_files = 0) {
    log_ = "/tmp/gpool-test-server-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++) + ".log";
    std::vector<std::string> args{GPOOL_SERVER_BIN, "--listen", "127.0.0.1:0", "--backend", "sim", "--log-level", "debug"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);  // a process group of its own, as a shell gives a command (interruptGroup)
      FILE* f = std::fopen(log_.c_str(), "w");
      ::dup2(fileno(f), 2);
      if (open_files) {
        rlimit r{open_files, open_files};
        ::setrlimit(RLIMIT_NOFILE, &r);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::regex listening("listening on 127\\.0\\.0\\.1:(\\d+)");
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      std::string text = log();
      if (std::regex_search(text, m, listening)) {
        port_ = std::stoi(m[1]);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("gpool-server did not start: " + log());
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);  // a draining server would wait for its workers
      int st;
      ::waitpid(pid_, &st, 0);
    }
    std::remove(log_.c_str());
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string log() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  bool alive() const { return ::kill(pid_, 0) == 0; }
  pid_t pid() const { return pid_; }
  void kill9() const { ::kill(pid_, SIGKILL); }
  void terminate() const { ::kill(pid_, SIGTERM); }
  // Ctrl-C at the terminal the server runs in: SIGINT to its whole process group, its workers too.
  void interruptGroup() const { ::killpg(pid_, SIGINT); }
  // Whether the server process has ended (reaping it) within `ms`.
  bool exitsWithin(int ms) {
    for (int i = 0; i < ms / 20; ++i) {
      int st;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // The pid of the worker the server started most recently for a client, from its log; 0 if none.
  pid_t lastWorker() const {
    std::string text = log();
    std::regex started("→ worker (\\d+)");
    pid_t pid = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), started); it != std::sregex_iterator(); ++it)
      pid = std::stoi((*it)[1]);
    return pid;
  }
  // Waits until the log contains `pattern` (regex); true when it appeared in time.
  bool waitForLog(const std::string& pattern, int ms = 5000) const {
    std::regex re(pattern);
    for (int i = 0; i < ms / 20; ++i) {
      if (std::regex_search(log(), re)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_;
};

}  // namespace gpool::test
