// A SIMT emulator for the Metal kernels compiled as C++ (compat/msl_compat.hpp): the threads of
// a threadgroup run as lanes (ucontext fibers on one host thread), one threadgroup after another.
// threadgroup_barrier blocks a lane until every lane of its threadgroup has arrived;
// simdgroup_barrier and the simd_* functions until every lane of its simdgroup of 32 has, and
// then combine the lanes' values in lane order (simd_sum adds lanes 0..31 in that order), so a
// run is deterministic. A lane that leaves while others wait at a barrier, or lanes of one
// simdgroup waiting at different kinds of collective, are errors (Metal leaves them undefined).
// Threadgroup memory is fresh for each threadgroup and filled with NaN bytes, so that reading it
// before writing it shows in the results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace deltafin::simt {

struct Group {  // threadgroup_position_in_grid
  uint32_t x, y, z;
};
// A kernel bound to its arguments: runs lane `lid` of threadgroup `group` with threadgroup
// memory `tg`.
using LaneBody = std::function<void(Group group, uint32_t lid, std::byte* tg)>;

// Runs grid[0] x grid[1] x grid[2] threadgroups of `threads` lanes (a multiple of 32, at most
// 1024) with `tg_bytes` of threadgroup memory each; throws std::runtime_error naming `kernel`
// on a barrier error.
void run(const std::string& kernel, const uint32_t grid[3], uint32_t threads, uint32_t tg_bytes, const LaneBody& body);

}  // namespace deltafin::simt
