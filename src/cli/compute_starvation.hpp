// Whether the machine starved the compute thread during a decode (the receipt's `cpu` line):
// the CPU time the compute thread got (CLOCK_THREAD_CPUTIME_ID) against the decode's compute
// time (wall time less the waits on reads, cli/overlap.hpp). On a busy machine the OS runs other
// processes in its place, and a slow decode is then the machine's, not deltafin's.
#pragma once

#include <time.h>

namespace deltafin::cli {

// Below this share of its compute time on a core, the compute thread counts as starved.
constexpr double kStarvedShare = 0.5;

// CPU seconds the calling thread has run.
inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

inline bool compute_starved(double cpu_seconds, double compute_seconds) {
  return compute_seconds > 0 && cpu_seconds < kStarvedShare * compute_seconds;
}

}  // namespace deltafin::cli
