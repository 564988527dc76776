// Planted error: a C-style cast between address spaces (clang accepts it; the rules do not)
// expect: C-style address-space cast
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;


kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
  device float* p = (device float*)tg;
  p[lid] = a.value;
}
