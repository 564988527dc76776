// Planted error: a function pointer
// expect: function pointer
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

inline float twice(float x) { return 2.0f * x; }

kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
  float (*f)(float) = twice;
  out[lid] = f(a.value);
}
