// The bytes of answers gpool-allocator's clients have not read yet, for the connections of a request gate
// (request_gate.h): the rest of an answer waiting in the allocator, and what its socket's kernel buffer
// holds. They are held at most to a budget (--max-unread-answers). Past it, the client (address, or local
// user) holding the most loses one answer, its oldest, until the rest fits again: a crowd that does not
// read drops its own answers, not a newcomer's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpool::allocator {

class UnreadAnswers {
 public:
  explicit UnreadAnswers(size_t budget) : budget_(budget) {}

  // What connection `fd` of `peer`, answered since `since`, holds unread now (0: nothing).
  void set(int fd, const std::string& peer, int64_t since, size_t bytes);
  void remove(int fd);  // nothing when it is not here
  std::optional<int> over() const;  // while past the budget: the connection to drop next
  std::vector<int> holding() const;  // the connections holding any
  size_t held() const { return held_; }
  size_t budget() const { return budget_; }

 private:
  struct Held {
    std::string peer;
    int64_t since;
    size_t bytes;
  };
  size_t budget_, held_ = 0;
  std::unordered_map<int, Held> of_;       // by descriptor, those holding any
  std::map<std::string, size_t> by_peer_;  // what each client holds in all
};

}  // namespace gpool::allocator
