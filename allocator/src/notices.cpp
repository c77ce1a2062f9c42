// The names of a lease's notices in the allocator's API (see gpool/allocator/notices.h).
#include "gpool/allocator/notices.h"

namespace gpool::allocator {

const char* noticeName(Notice n) {
  switch (n) {
    case Notice::kPreemption: return "preemption";
    case Notice::kMove: return "move";
    case Notice::kRound: return "round";
    case Notice::kTimeLimit: return "time-limit";
    default: return "";
  }
}

Notice noticeFromName(std::string_view name) {
  for (Notice n : {Notice::kPreemption, Notice::kMove, Notice::kRound, Notice::kTimeLimit})
    if (name == noticeName(n)) return n;
  return Notice::kNone;
}

}  // namespace gpool::allocator
