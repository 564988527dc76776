// Planted error: a threadgroup pointer passed where a device pointer is expected
// expect: no matching function
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

inline float first(device const float* p) { return p[0]; }

kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
  out[lid] = first(tg);
}
