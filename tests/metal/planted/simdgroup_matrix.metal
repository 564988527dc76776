// Planted error: simdgroup_matrix, left out of this version
// expect: simdgroup_matrix
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;


kernel void df_planted(constant FillArgs& a [[buffer(0)]], device float* out [[buffer(1)]],
                        threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                        uint lid [[thread_index_in_threadgroup]]) {
  simdgroup_matrix<float, 8, 8> m;
  out[lid] = a.value;
}
