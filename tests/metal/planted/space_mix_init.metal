// Planted error: a threadgroup pointer stored in a device pointer
// expect: cannot initialize a variable of type 'device float \*'
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;


kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
  device float* p = tg;
  p[lid] = 1.0f;
}
