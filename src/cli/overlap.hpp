// How well a decode kept the drives and the cores busy at once (the receipt's `overlap` line):
//   compute  = decode wall time - the time the compute thread waited on reads (expert acquires
//              and streamed spine units);
//   I/O      = the busiest drive's busy time (time with at least one read in flight on it),
//              counting the queue the streamed spine is read through as a drive;
//   bound    = max(compute, I/O): the decode's wall time were compute and reads perfectly
//              overlapped;
//   fraction = bound / decode wall time (1: neither ever waited for the other).
// Reads of guesses (router lookahead) that go unused count as I/O time, so the fraction is read
// with the decode rate beside it.
#pragma once

#include <deltafin/engine.hpp>

#include <algorithm>
#include <string>

namespace deltafin::cli {

struct Overlap {
  double wall = 0, read_wait = 0, compute = 0, io = 0, bound = 0, fraction = 0;
  std::string busiest;  // the drive whose busy time is `io` ("" without reads)
};

// start, end: the engine's counters when the decode began and ended; wall: its seconds.
inline Overlap decode_overlap(const EngineStats& start, const EngineStats& end, double wall) {
  Overlap o;
  o.wall = wall;
  o.read_wait = (end.io_wait_seconds - start.io_wait_seconds) + (end.spine_wait_seconds - start.spine_wait_seconds);
  o.compute = std::max(0.0, wall - o.read_wait);
  for (size_t d = 0; d < end.drives.size(); ++d) {
    const double busy = end.drives[d].busy_seconds - (d < start.drives.size() ? start.drives[d].busy_seconds : 0.0);
    if (busy > o.io) o.io = busy, o.busiest = end.drives[d].path;
  }
  const double spine = end.spine_drive_busy_seconds - start.spine_drive_busy_seconds;
  if (spine > o.io) o.io = spine, o.busiest = "spine queue";
  o.bound = std::max(o.compute, o.io);
  o.fraction = wall > 0 ? std::min(1.0, o.bound / wall) : 0.0;
  return o;
}

}  // namespace deltafin::cli
