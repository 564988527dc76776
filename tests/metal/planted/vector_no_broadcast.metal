// Planted error: a scalar assigned to a vector without its constructor
// expect: no viable conversion|no viable overloaded
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;


kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
  float4 v = float4(0.0f);
  v = a.value;
  out[lid] = v.x;
}
