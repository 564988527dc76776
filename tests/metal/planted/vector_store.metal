// Planted error: a whole vector stored into device memory (components only, in the subset)
// expect: no viable overloaded '='
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;


kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
  device float4* v = reinterpret_cast<device float4*>(out);
  v[lid] = float4(a.value);
}
