// Interleaved RoPE in place: in row t (position start + t) and head h, pair i of the rotated
// part turns by the fp32 angle (start + t) * inv_freq[i] (as the CPU computes it), cos and sin
// in precise fp32, each times the attention factor. One thread per (head, pair); grid
// (ceil(heads * pairs / kThreads), n).
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

// x [n, heads * head_dim], inv_freq [pairs].
kernel void df_rope(constant RopeArgs& a [[buffer(0)]], device float* x [[buffer(kRopeX)]],
                    device const float* inv_freq [[buffer(kRopeFreq)]], threadgroup float* tg [[threadgroup(0)]],
                    uint3 group [[threadgroup_position_in_grid]], uint lid [[thread_index_in_threadgroup]]) {
  const uint idx = group.x * kThreads + lid, t = group.y;
  if (idx >= a.heads * a.pairs) return;
  const uint h = idx / a.pairs, i = idx % a.pairs;
  const float angle = float(a.start + t) * inv_freq[i];
  const float c = cos(angle) * a.factor, s = sin(angle) * a.factor;
  device float* p = x + t * a.x.stride + h * a.head_dim + a.offset + 2u * i;
  const float u = p[0], v = p[1];
  p[0] = u * c - v * s;
  p[1] = v * c + u * s;
}
