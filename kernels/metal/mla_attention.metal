// Absorbed multi-head latent attention (cpu/mla_attention.hpp) for n causal queries; query t
// at position start + t attends to cache rows [0, start + t]. One threadgroup of kThreads per
// (head, query), grid (heads, n). Per threadgroup:
//   q_lat[c] = sum_d q_nope[d] W_UK[d, c]     thread per column c, d ascending
//   scores    simdgroup per position (lanes over columns, simd_sum), (q_lat.c_j + q_pe.pe_j) * scale
//   softmax   online over tiles of kMlaCtxTile positions from position 0: running max, the tile's
//             exp sum by tg_sum, o_lat[c] = o_lat[c] * rescale + sum_j p_j c_j[c] (j ascending)
//   out[i]    = sum_c W_UV[i, c] o_lat[c] / sum   simdgroup per output, lanes over columns
// Every order depends only on the shape and the query's position, so a query gives the same
// bits in any batch.
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

// q [n, heads * (nope + rope)], cache_c [ctx, kv_lora], cache_pe [ctx, rope] -> out [n, heads * v].
// tg: nope + rope + 2 kv_lora + kMlaCtxTile + kSimdgroups floats.
kernel void df_mla_attention(constant MlaArgs& a [[buffer(0)]], device const uchar* data [[buffer(kMlaData)]],
                             device const uchar* scales [[buffer(kMlaScales)]], device const float* q [[buffer(kMlaQ)]],
                             device const float* cache_c [[buffer(kMlaCacheC)]],
                             device const float* cache_pe [[buffer(kMlaCachePe)]], device float* out [[buffer(kMlaOut)]],
                             threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                             uint lid [[thread_index_in_threadgroup]]) {
  threadgroup float* q_nope = tg;                  // [nope]
  threadgroup float* q_pe = q_nope + a.nope;       // [rope]
  threadgroup float* q_lat = q_pe + a.rope;        // [kv_lora]
  threadgroup float* o_lat = q_lat + a.kv_lora;    // [kv_lora]
  threadgroup float* p = o_lat + a.kv_lora;        // [kMlaCtxTile] scores, then their exps
  threadgroup float* scratch = p + kMlaCtxTile;    // [kSimdgroups]
  const uint h = group.x, t = group.y, lane = lid % kSimdWidth, sg = lid / kSimdWidth;
  const uint L = a.kv_lora, ctx = a.start + t + 1u;
  const uint uk_row = h * (a.nope + a.v), uv_row = uk_row + a.nope;

  device const float* qh = q + t * a.q.stride + h * (a.nope + a.rope);
  for (uint i = lid; i < a.nope + a.rope; i += kThreads) q_nope[i] = qh[i];  // q_pe follows q_nope
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint c = lid; c < L; c += kThreads) {
    float acc = 0.0f;
    for (uint d = 0; d < a.nope; ++d) acc = fma(q_nope[d], weight_at_any(a.kv_b, data, scales, uk_row + d, c), acc);
    q_lat[c] = acc;
    o_lat[c] = 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  float running_max = -INFINITY, sum = 0.0f;
  for (uint j0 = 0; j0 < ctx; j0 += kMlaCtxTile) {
    const uint len = min(ctx - j0, uint(kMlaCtxTile));
    for (uint jj = sg; jj < len; jj += kSimdgroups) {
      device const float* cj = cache_c + (j0 + jj) * a.cache_c.stride;
      device const float* pej = cache_pe + (j0 + jj) * a.cache_pe.stride;
      float dot_c = 0.0f, dot_pe = 0.0f;
      for (uint c = lane; c < L; c += kSimdWidth) dot_c = fma(q_lat[c], cj[c], dot_c);
      for (uint c = lane; c < a.rope; c += kSimdWidth) dot_pe = fma(q_pe[c], pej[c], dot_pe);
      const float score = (simd_sum(dot_c) + simd_sum(dot_pe)) * a.scale;
      if (lane == 0u) p[jj] = score;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float mine = lid < len ? p[lid] : -INFINITY;
    const float new_max = fmax(running_max, tg_max(mine, scratch, lid, kSimdgroups));
    const float rescale = exp(running_max - new_max);
    const float e = lid < len ? exp(mine - new_max) : 0.0f;
    const float tile_sum = tg_sum(e, scratch, lid, kSimdgroups);
    if (lid < len) p[lid] = e;
    sum = sum * rescale + tile_sum;
    running_max = new_max;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint c = lid; c < L; c += kThreads) {
      float acc = o_lat[c] * rescale;
      for (uint jj = 0; jj < len; ++jj) acc = fma(p[jj], cache_c[(j0 + jj) * a.cache_c.stride + c], acc);
      o_lat[c] = acc;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (uint c = lid; c < L; c += kThreads) o_lat[c] = o_lat[c] / sum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = sg; i < a.v; i += kSimdgroups) {
    float acc = 0.0f;
    for (uint c = lane; c < L; c += kSimdWidth) acc = fma(weight_at_any(a.kv_b, data, scales, uv_row + i, c), o_lat[c], acc);
    acc = simd_sum(acc);
    if (lane == 0u) out[t * a.out.stride + h * a.v + i] = acc;
  }
}
