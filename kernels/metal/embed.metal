// Embedding rows: out [n, cols] = row ids[t] of the table, dequantized exactly (a decode, no
// arithmetic beyond the format's scale). One thread per element; grid (ceil(cols / kThreads), n).
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

kernel void df_embed(constant EmbedArgs& a [[buffer(0)]], device const uchar* data [[buffer(kEmbedData)]],
                     device const uchar* scales [[buffer(kEmbedScales)]], device const int* ids [[buffer(kEmbedIds)]],
                     device float* out [[buffer(kEmbedOut)]], threadgroup float* tg [[threadgroup(0)]],
                     uint3 group [[threadgroup_position_in_grid]], uint lid [[thread_index_in_threadgroup]]) {
  const uint k = group.x * kThreads + lid, t = group.y;
  if (k >= a.out.cols) return;
  const int row = ids[t * a.ids.stride];  // out of range: NaN, which the non-finite checks catch
  out[t * a.out.stride + k] = row >= 0 && uint(row) < a.w.rows ? weight_at_any(a.w, data, scales, uint(row), k) : NAN;
}
