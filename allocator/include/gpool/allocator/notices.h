// Why a granted lease has notice, as the allocator's API names it (a lease's `notice`) and as the gpool
// command tells its user: a queue takes back its guarantee (its preempted_for names the request it makes
// room for), its job moves to a faster GPU type ("move to V100"), its pool's round gives its GPUs to other
// jobs or another type ("round: ..."), or it reaches its time limit ("time limit: 2h").
#pragma once

#include <string_view>

namespace gpool::allocator {

enum class Notice { kNone, kPreemption, kMove, kRound, kTimeLimit };
// How preempted_for begins for the notices that make room for no request.
inline constexpr std::string_view kMovePrefix = "move to ";
inline constexpr std::string_view kRoundPrefix = "round: ";
inline constexpr std::string_view kTimeLimitPrefix = "time limit: ";

const char* noticeName(Notice n);              // "", "preemption", "move", "round", "time-limit"
Notice noticeFromName(std::string_view name);  // kNone for anything else

}  // namespace gpool::allocator
