// What the test programs that share memory between processes have in common: passing a file descriptor
// over a Unix socket (SCM_RIGHTS), as NVIDIA's IPC samples do, and bytes as hex on a command line.
#pragma once

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "checks.h"
#include "hex.h"

// One byte with room for one descriptor, as sendFd sends it and receiveFd receives it.
struct FdMessage {
  char byte = 'h';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
};

inline void sendFd(int sock, int fd) {
  FdMessage m;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  check(sendmsg(sock, &m.msg, 0) == 1, "the descriptor is sent to the child over the socket");
}

inline int receiveFd(int sock) {
  FdMessage m;
  if (recvmsg(sock, &m.msg, 0) != 1 || !CMSG_FIRSTHDR(&m.msg)) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m.msg)), sizeof fd);
  return fd;
}

// Starts this program again as `argv0 child SOCKET ARGS...`, sends it `fd` over SOCKET, waits for its one
// byte 'd' (its work is done) and its exit, and checks both.
inline void runChild(const char* argv0, int fd, const std::vector<std::string>& args, const char* work) {
  int socks[2];
  check(socketpair(AF_UNIX, SOCK_STREAM, 0, socks) == 0, "a socket pair to the child");
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(socks[0]);
    std::vector<std::string> all{argv0, "child", std::to_string(socks[1])};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(socks[1]);
  sendFd(socks[0], fd);
  char done = 0;
  check(read(socks[0], &done, 1) == 1 && done == 'd', work);
  close(socks[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child process passed its checks");
}

// The child's side: says its work is done.
inline void childDone(int sock) {
  char done = 'd';
  check(write(sock, &done, 1) == 1, "child: says it is done");
}
