// Planted error: reinterpret_cast between address spaces
// expect: reinterpret_cast from 'threadgroup float \*' to 'device float \*' is not allowed
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;


kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
  device float* p = reinterpret_cast<device float*>(tg);
  p[lid] = a.value;
}
