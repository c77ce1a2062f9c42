// Whether this host has CPU time to spare, for transports deciding whether to poll while they wait.
// Polling saves the wake-up of a sleeping thread (on an idle machine most of a loopback round trip), but
// on a host whose cores are all busy it only takes time from the threads that would answer: measured on a
// 2-core VM with two busy loops beside it, launch + synchronise over TCP took 9.6 µs sleeping and 67 µs
// polling.
#pragma once

namespace gpool::proto {

// True when at least half a core was idle over the last 50 ms or so (/proc/stat, read at most every 50 ms
// by whichever thread asks first; true where it cannot be read).
bool hostHasSpareCores();

}  // namespace gpool::proto
