// Planted error: double, which Metal lacks
// expect: msl_subset_has_no_double
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;


kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
  double x = a.value;
  out[lid] = float(x);
}
