// Planted error: buffer indices that skip one (the emulator binds by position)
// expect: buffer indices \[0, 2\], expected 0, 1, 2
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(2)]],
                       threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                       uint lid [[thread_index_in_threadgroup]]) {
  out[lid] = a.value;
}
