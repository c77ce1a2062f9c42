// Runs a check in a child process, for what a process cannot undo once done (a sandbox, a seccomp filter).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <functional>

namespace gpool::worker {

// What `act` returned in a child that ran `enter` first; -1 when `enter` failed, -2 when the child said nothing.
inline int inChild(const std::function<bool()>& enter, const std::function<int()>& act) {
  int result[2];
  if (::pipe(result) != 0) return -2;
  pid_t child = ::fork();
  if (child == 0) {
    int said = enter() ? act() : -1;
    ::_exit(::write(result[1], &said, sizeof said) == sizeof said ? 0 : 1);
  }
  int said = -2;
  if (::read(result[0], &said, sizeof said) != sizeof said) said = -2;
  ::waitpid(child, nullptr, 0);
  ::close(result[0]), ::close(result[1]);
  return said;
}

}  // namespace gpool::worker
