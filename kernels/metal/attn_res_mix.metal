// Attention-Residuals mix per row (cpu::attn_res_mix): score_i = sum_d v_i[d] / rms(v_i) * w[d]
// (tg_sum), the softmax of the scores (max, exp, sum in index order, by thread 0), then
// out[d] = sum_i p_i v_i[d] by fma from zero, i ascending. The host packs the candidates
// [count, n, dim] first. One threadgroup of kThreads per row; grid (n).
#include <metal_stdlib>

#include "common.h"

using namespace metal;
using namespace dfm;

// packed [count, n, dim], query [dim] -> out [n, dim]; tg: kSimdgroups + kMaxMixCandidates floats.
kernel void df_attn_res_mix(constant MixArgs& a [[buffer(0)]], device const float* packed [[buffer(kMixPacked)]],
                            device const float* query [[buffer(kMixQuery)]], device float* out [[buffer(kMixOut)]],
                            threadgroup float* tg [[threadgroup(0)]], uint3 group [[threadgroup_position_in_grid]],
                            uint lid [[thread_index_in_threadgroup]]) {
  threadgroup float* scratch = tg;           // [kSimdgroups]
  threadgroup float* p = tg + kSimdgroups;   // [kMaxMixCandidates]
  const uint t = group.x, dim = a.out.cols, n = a.out.rows;
  for (uint i = 0; i < a.count; ++i) {
    device const float* v = packed + (i * n + t) * dim;
    float sq = 0.0f;
    for (uint d = lid; d < dim; d += kThreads) sq = fma(v[d], v[d], sq);
    const float inv = 1.0f / sqrt(tg_sum(sq, scratch, lid, kSimdgroups) / float(dim) + a.eps);
    float s = 0.0f;
    for (uint d = lid; d < dim; d += kThreads) s = fma(v[d] * inv, query[d], s);
    s = tg_sum(s, scratch, lid, kSimdgroups);
    if (lid == 0u) p[i] = s;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lid == 0u) {
    float top = -INFINITY;
    for (uint i = 0; i < a.count; ++i) top = fmax(top, p[i]);
    float total = 0.0f;
    for (uint i = 0; i < a.count; ++i) {
      p[i] = exp(p[i] - top);
      total += p[i];
    }
    for (uint i = 0; i < a.count; ++i) p[i] = p[i] / total;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint d = lid; d < dim; d += kThreads) {
    float acc = 0.0f;
    for (uint i = 0; i < a.count; ++i) acc = fma(p[i], packed[(i * n + t) * dim + d], acc);
    out[t * a.out.stride + d] = acc;
  }
}
