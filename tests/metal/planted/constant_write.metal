// Planted error: a write into the constant argument struct
// expect: read-only|cannot assign
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;


kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
  a.value = 1.0f;
  out[lid] = a.value;
}
