// Planted error: a recursive function
// expect: recursion: fact calls itself
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

inline uint fact(uint n) { return n <= 1u ? 1u : n * fact(n - 1u); }

kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
  out[lid] = float(fact(lid));
}
